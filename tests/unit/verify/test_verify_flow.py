"""verify end to end against an existing environment, with a fake Python standing in for it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.util.units import GIB
from toolchain.verify.memflag import NodeMemory
from toolchain.verify.results import PASS, CheckResult


@pytest.fixture
def zen4(cpuinfo_file, monkeypatch: pytest.MonkeyPatch) -> None:
    host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))
    monkeypatch.setattr(
        "toolchain.verify.flow.detect_host", lambda: replace(host, numa_nodes=1, cpu_quota=None)
    )


FACTS = {
    "python": "",
    "vllm_distributions": {"vllm": "0.32.0+cpu.portable"},
    "vllm_version_of_vllm": "0.32.0+cpu.portable",
    "torch": "2.13.0+cpu",
    "torch_cuda": None,
    "companions": {},
    "platform": {"device_type": "cpu", "error": ""},
    "kernels_loaded": False,
    "openmp_runtimes": ["/site/torch/lib/libgomp.so.1"],
    "torch_threads": 2,
    "affinity": [0, 1],
    "console_script": "",
    "console_script_exists": True,
    "bundled_tcmalloc": ["/site/vllm/libs/libtcmalloc_minimal.so.4"],
}


def _environment(tmp_path: Path, fake_programs, *, sigill: bool = False) -> list[str]:
    """A fake environment; with `sigill`, loading `_C` kills the process as on a CPU without AMX."""
    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    for tier in ("_C", "_C_AVX512", "_C_AVX2"):
        (package / f"{tier}.abi3.so").write_bytes(b"\x7fELF")
    facts = json.dumps({**FACTS, "vllm_package": str(package)})

    def python(argv: list[str]) -> tuple[int, str]:
        if argv[1].endswith("probe_env.py"):
            return (-4, "") if sigill and argv[2:] else (0, f"log line\nRESULT {facts}\n")
        if argv[1] == "-c" and "find_spec" in argv[2]:
            return 0, f"{package}\n"
        return (-4, "") if sigill and argv[-1].endswith("/_C.abi3.so") else (0, "")

    fake_programs.add("python", answer=python)
    fake_programs.add("vllm", "0.32.0+cpu.portable\n")
    project = tmp_path / "project"
    project.mkdir()
    python_path = str(fake_programs.folder / "python")
    return [
        "verify",
        "--python",
        python_path,
        "--project",
        str(project),
        "--work-dir",
        str(tmp_path / "work"),
    ]


def test_verify_an_existing_environment_without_engines(
    tmp_path: Path, fake_programs, zen4, capsys
) -> None:
    work = tmp_path / "work"
    code = main([*_environment(tmp_path, fake_programs), "--only", "install,isa,import,threads"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((work / "verify" / "report.json").read_text())
    assert [c["name"] for c in report["checks"]] == ["install", "isa", "import", "threads"]
    assert {c["status"] for c in report["checks"]} == {"pass"}
    assert "verify: 0 failed, 0 warned, 4 passed" in out
    probes = [c for c in fake_programs.calls if c[1].endswith("probe_env.py")]
    assert [c[2:] for c in probes] == [[], ["--load-kernels"]]
    loads = [c for c in fake_programs.calls if c[1] == "-c" and "load_library" in c[2]]
    assert sorted(Path(c[-1]).name for c in loads) == [
        "_C.abi3.so",
        "_C_AVX2.abi3.so",
        "_C_AVX512.abi3.so",
    ]


def test_json_prints_one_object_on_stdout_and_the_progress_on_stderr(
    tmp_path: Path, fake_programs, zen4, capsys
) -> None:
    argv = [*_environment(tmp_path, fake_programs), "--only", "install,isa", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # nothing else on stdout
    assert [c["name"] for c in report["checks"]] == ["install", "isa"]
    assert "==> isa" in captured.err and "==> isa" not in captured.out


def test_a_tier_killed_by_sigill_is_a_failed_check_not_a_crash(
    tmp_path: Path, fake_programs, zen4, capsys
) -> None:
    argv = [*_environment(tmp_path, fake_programs, sigill=True), "--only", "isa,threads"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL  isa       vLLM loads _C on this CPU and it cannot: _C.abi3.so: killed by SIGILL"
        in out
    )
    assert "WARN  threads" in out and "without vLLM's kernels" in out


REFUSAL = (
    "ValueError: Available memory on node 0 (5.20/14.00 GiB) on startup is less than desired "
    "CPU memory utilization (0.4, 5.60 GiB). Decrease memory utilization or reduce memory usage"
)


def _node_memory(*available_gib: float):
    """node_memory for verify: each call sees the next available figure (memory taken meanwhile)."""
    figures = iter(available_gib)

    def node_memory(node: int = 0) -> NodeMemory:
        return NodeMemory(
            node=node,
            total_bytes=14 * GIB,
            available_bytes=int(next(figures) * GIB),
            source="node meminfo",
            system_total_bytes=int(23.5 * GIB),
            system_available_bytes=22 * GIB,
        )

    return node_memory


def _node_memory_seen(monkeypatch: pytest.MonkeyPatch, *available_gib: float) -> None:
    """The engines' set-up and generate's retry each read the node's memory."""
    seen = _node_memory(*available_gib)
    monkeypatch.setattr("toolchain.verify.context.node_memory", seen)
    monkeypatch.setattr("toolchain.verify.checks.generate.node_memory", seen)


def _engines(tmp_path: Path, fake_programs, monkeypatch, accepts: float) -> list[object]:
    """A fake engine that vLLM-style refuses any setting above `accepts`; serve is recorded."""
    argv = _environment(tmp_path, fake_programs)
    python = fake_programs.answers["python"]
    started = {"vllm_version": "0.32.0+cpu", "load_seconds": 30.0, "start_method": "spawn"}
    runs = [{"prompts": 1, "generated_tokens": 16, "tokens_per_second": 100.0}]

    def engine_or_probe(call: list[str]) -> tuple[int, str]:
        if not call[1].endswith("generate_check.py"):
            return python(call) if callable(python) else python
        setting = float(call[call.index("--gpu-memory-utilization") + 1])
        if setting > accepts:
            return 1, f"INFO starting\n{REFUSAL}\n"
        result = {**started, "runs": runs}
        return 0, f"STARTED {json.dumps(started)}\nRESULT {json.dumps(result)}\n"

    fake_programs.answers["python"] = engine_or_probe
    served: list[object] = []

    def run_serve(engine: object) -> CheckResult:
        served.append(engine)
        return CheckResult(name="serve", status=PASS, summary="served")

    monkeypatch.setattr("toolchain.verify.checks.serve.run_serve", run_serve)
    model = tmp_path / "model"
    model.mkdir()
    argv += ["--model", str(model), "--only", "generate,memory,spawn,serve"]
    return [argv, served]


def test_a_refused_memory_setting_is_retried_so_generate_spawn_and_serve_are_proven(
    tmp_path: Path, fake_programs, zen4, monkeypatch, capsys
) -> None:
    # 0.4 of 14 GiB leaves the margin when checked (8 GiB free), then a neighbour takes 2 GiB
    _node_memory_seen(monkeypatch, 8, 6)
    argv, served = _engines(tmp_path, fake_programs, monkeypatch, accepts=0.35)
    assert main([*argv, "--gpu-memory-utilization", "0.4"]) == 1
    out = capsys.readouterr().out
    settings = [
        c[c.index("--gpu-memory-utilization") + 1]
        for c in fake_programs.calls
        if c[1].endswith("generate_check.py")
    ]
    assert settings == ["0.4", "0.32"]  # the retry: (6 GiB - 1.5 GiB margin) / 14 GiB
    assert "retrying with 0.32" in out
    report = json.loads((tmp_path / "work" / "verify" / "report.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert {name: c["status"] for name, c in checks.items()} == {
        "generate": "pass",
        "memory": "fail",
        "spawn": "pass",
        "serve": "pass",
    }
    assert checks["generate"]["summary"].startswith(
        "with --gpu-memory-utilization 0.32 after vLLM refused --gpu-memory-utilization 0.4: "
    )
    assert (
        "(5.20 of 14.00 GiB available at engine start, 5.60 GiB asked)"
        in (checks["memory"]["summary"])
    )
    assert (
        checks["memory"]["fix"] == "use --gpu-memory-utilization 0.32 (proven by an engine start)"
    )
    assert "the engine started with the spawn start method" in checks["spawn"]["summary"]
    assert len(served) == 1
    logs = tmp_path / "work" / "verify"
    assert REFUSAL in (logs / "generate-refused.log").read_text()
    assert "RESULT" in (logs / "generate.log").read_text()


def test_a_marginal_default_fails_up_front_and_the_engines_run_with_the_recommendation(
    tmp_path: Path, fake_programs, zen4, monkeypatch, capsys
) -> None:
    # the machine: 0.92 of the node would start now, with 0.2 GiB to spare
    _node_memory_seen(monkeypatch, 13.08)
    argv, served = _engines(tmp_path, fake_programs, monkeypatch, accepts=0.92)
    assert main(argv) == 1
    out = capsys.readouterr().out
    settings = [
        c[c.index("--gpu-memory-utilization") + 1]
        for c in fake_programs.calls
        if c[1].endswith("generate_check.py")
    ]
    assert settings == ["0.82"]  # (13.08 - 1.5) / 14, rounded down: one start, no retry
    assert "FAIL  memory    --gpu-memory-utilization 0.92 reserves 12.88 GiB of NUMA node 0" in out
    assert "(/proc/meminfo: 23.50 GiB total, 22.00 GiB available), leaving 0.20 GiB" in out
    assert "the engine started with --gpu-memory-utilization 0.82" in out
    assert "PASS  generate" in out and "PASS  spawn" in out and "PASS  serve" in out
    assert len(served) == 1


def test_an_emulated_verify_holds_the_work_folder_lock_too(
    tmp_path: Path, fake_programs, zen4, make_wheel, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from toolchain.emulate.decide import EMULATED, Decision
    from toolchain.util.files import file_lock
    from toolchain.verify.flow import LOCK_NAME

    def not_while_locked(*args: object) -> None:
        raise AssertionError("emulated verify started while another verify held the folder")

    monkeypatch.setattr(
        "toolchain.verify.flow.decide",
        lambda *a, **k: Decision(mode=EMULATED, wheel_arch="aarch64", reason="emulated"),
    )
    monkeypatch.setattr("toolchain.verify.emulated.verify_emulated", not_while_locked)
    wheel = make_wheel(
        tmp_path, "vllm", "0.32.0+cpu.bf16i8mm", tag="cp311-cp311-manylinux_2_34_aarch64"
    )
    work = tmp_path / "work"
    with file_lock(work / "verify" / LOCK_NAME, what="verify", wait=False):
        code = main(["verify", str(wheel), "--work-dir", str(work)])
    assert code == 13, capsys.readouterr()
    assert "another verify is running" in capsys.readouterr().err
