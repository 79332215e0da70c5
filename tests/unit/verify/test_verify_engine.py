"""The generate check reads what the engine script printed; failures name their root cause."""

from __future__ import annotations

import json
from pathlib import Path

from toolchain.verify.engine_checks import SCRIPTS, Engine, root_error, run_generate
from toolchain.verify.results import FAIL, PASS

STARTED = {"vllm_version": "0.32.0+cpu", "load_seconds": 40.0, "start_method": "spawn"}
RUNS = [
    {"prompts": 1, "generated_tokens": 16, "tokens_per_second": 300.0},
    {"prompts": 32, "generated_tokens": 512, "tokens_per_second": 6000.0},
]
WORKER_LOG = """(Worker pid=1) ERROR [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=1) ERROR [multiproc_executor.py:1063] RuntimeError: Boolean value of Tensor is ambiguous
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
"""


def _engine(tmp_path: Path, python: Path) -> Engine:
    return Engine(python=python, model=tmp_path / "m", utilization=0.5, env={}, logs=tmp_path)


def test_generate_reports_tokens_per_second_for_1_and_32_prompts(
    tmp_path: Path, fake_programs
) -> None:
    out = f"STARTED {json.dumps(STARTED)}\nRESULT {json.dumps({**STARTED, 'runs': RUNS})}\n"
    python = fake_programs.add("python", out)
    result = run_generate(_engine(tmp_path, python))
    assert result.status == PASS
    assert result.summary == (
        "engine up in 40.0 s; 1 prompt(s) 16 tokens at 300.0 tok/s, "
        "32 prompt(s) 512 tokens at 6000.0 tok/s"
    )
    argv = fake_programs.calls[0]
    assert argv[argv.index("--prompts") + 1 : argv.index("--prompts") + 3] == ["1", "32"]
    assert argv[-2:] == ["--gpu-memory-utilization", "0.5"]
    assert result.details["started"] and (tmp_path / "generate.log").read_text() == out


def test_an_engine_that_starts_then_fails_is_a_failure_with_the_worker_error(
    tmp_path: Path, fake_programs
) -> None:
    python = fake_programs.add("python", f"STARTED {json.dumps(STARTED)}\n{WORKER_LOG}", 1)
    result = run_generate(_engine(tmp_path, python))
    assert result.status == FAIL
    assert result.summary == (
        "LLM.generate failed (exit 1): RuntimeError: Boolean value of Tensor is ambiguous"
    )
    assert result.details["started"] is True and result.details["memory_refused"] is False


def test_root_error_falls_back_to_the_last_line() -> None:
    assert root_error("starting\nKilled\n") == "Killed"
    assert root_error("") == "no output"


def test_an_emulated_generate_asks_for_a_fixed_kv_cache_not_the_memory_flag(
    tmp_path: Path, fake_programs
) -> None:
    out = f"RESULT {json.dumps({**STARTED, 'runs': RUNS})}\n"
    python = fake_programs.add("python", out)
    engine = Engine(
        python=python, model=tmp_path / "m", utilization=0.5, env={}, logs=tmp_path,
        kv_cache_bytes=1 << 30, eager=True,
    )  # fmt: skip
    assert run_generate(engine).status == PASS
    argv = fake_programs.calls[0]
    assert argv[-3:] == ["--kv-cache-memory-bytes", str(1 << 30), "--enforce-eager"]
    assert "--gpu-memory-utilization" not in argv


def test_a_native_generate_compiles_and_the_script_knows_the_eager_flag(
    tmp_path: Path, fake_programs
) -> None:
    python = fake_programs.add("python", f"RESULT {json.dumps({**STARTED, 'runs': RUNS})}\n")
    assert run_generate(_engine(tmp_path, python)).status == PASS
    assert "--enforce-eager" not in fake_programs.calls[0]
    script = (SCRIPTS / "generate_check.py").read_text()
    assert '"--enforce-eager"' in script and "enforce_eager=args.enforce_eager" in script
