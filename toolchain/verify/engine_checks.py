"""verify's checks that run a real engine: offline generate, then `vllm serve` over HTTP."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.verify.openai_api import ApiReport, exercise
from toolchain.verify.results import FAIL, PASS, CheckResult
from toolchain.verify.server import Server, free_port, scratch

SCRIPTS = Path(__file__).parent / "scripts"
MODEL_NAME = "verify-model"
API_SERVER = "vllm.entrypoints.openai.api_server"  # what `vllm serve` runs, without the CLI
PROMPT_COUNTS = (1, 32)
# generate proves the memory setting; the server gets a small fixed KV cache, which starts in
# half the time on these machines (first touch of many GiB is slow under a hypervisor).
SERVE_KV_CACHE_BYTES = 1 << 30
EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception): .+$")
MEMORY_REFUSED = "Available memory on node"  # vLLM 0.32's refusal (cpu_worker.py)
# "... on node 0 (10.36/11.71 GiB) on startup is less than desired ... (0.92, 10.78 GiB)"
MEMORY_SEEN = re.compile(
    r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\).*?\(([\d.]+), ([\d.]+) GiB\)"
)


@dataclass(frozen=True, kw_only=True)
class Engine:
    """How to start vLLM in the environment under test."""

    python: Path
    model: Path
    utilization: float
    env: Mapping[str, str]
    logs: Path
    use_console_script: bool = True
    timeout: float = 900.0  # seconds for generate; longer under emulation
    kv_cache_bytes: int = 0  # generate with this KV cache instead of `utilization` (emulated)
    eager: bool = False  # no torch.compile (emulated: compiling under qemu outlasts the budget)


def run_generate(engine: Engine) -> CheckResult:
    """LLM.generate on 1 and 32 prompts in one engine; tokens/s for each."""
    log = engine.logs / "generate.log"
    argv: list[str | Path] = [
        engine.python,
        SCRIPTS / "generate_check.py",
        engine.model,
        "--prompts",
        *map(str, PROMPT_COUNTS),
        *(
            ["--kv-cache-memory-bytes", str(engine.kv_cache_bytes)]
            if engine.kv_cache_bytes
            else ["--gpu-memory-utilization", str(engine.utilization)]
        ),
        *(["--enforce-eager"] if engine.eager else []),
    ]
    with scratch(engine.env) as place:
        run.announce(argv)
        output = run.capture(
            argv, timeout=engine.timeout, check=False, cwd=place.folder, env=place.env
        )
    log.write_text(output.stdout + output.stderr)
    started = marked(output.stdout, "STARTED ")
    report = marked(output.stdout, "RESULT ")
    details = {
        **started,
        **report,
        "started": bool(started),
        "memory_refused": MEMORY_REFUSED in output.stdout + output.stderr,
        "memory_seen": memory_seen(output.stdout + output.stderr),
        "utilization": engine.utilization,
        "log": str(log),
        "cleaned": place.removed,
    }
    if output.returncode != 0 or not report:
        return CheckResult(
            name="generate",
            status=FAIL,
            details=details,
            summary=f"LLM.generate failed (exit {output.returncode}): "
            + root_error(output.stdout + output.stderr),
            fix=f"read {log}",
        )
    rates = ", ".join(
        f"{r['prompts']} prompt(s) {r['generated_tokens']} tokens at {r['tokens_per_second']} tok/s"
        for r in report["runs"]
    )
    return CheckResult(
        name="generate",
        status=PASS,
        details=details,
        summary=f"engine up in {report['load_seconds']} s; {rates}",
    )


def memory_seen(text: str) -> str:
    """What vLLM saw when it refused a memory setting, in a few words, or ''."""
    match = MEMORY_SEEN.search(text)
    if match is None:
        return ""
    available, total, _, wanted = match.groups()
    return f"{available} of {total} GiB available at engine start, {wanted} GiB asked"


def marked(stdout: str, mark: str) -> dict[str, Any]:
    """The JSON on the line of `stdout` that starts with `mark`, or {}."""
    line = next((x for x in stdout.splitlines() if x.startswith(mark)), None)
    try:
        found = parse_json(line.removeprefix(mark), where=mark) if line else {}
    except DataFileError:
        return {}  # the check reports the run as failed, with its log
    return found if isinstance(found, dict) else {}


def root_error(text: str) -> str:
    """The first exception a log names (the worker's, not the engine's EngineDeadError)."""
    for line in text.splitlines():
        match = EXCEPTION.search(line)
        if match and not match.group(0).startswith("EngineDeadError"):
            return match.group(0)[:300]
    return (text.strip().splitlines() or ["no output"])[-1][:300]


def _exercise(base: str) -> ApiReport:
    try:
        return exercise(base, MODEL_NAME)
    except (OSError, ValueError, KeyError, DataFileError) as exc:  # a malformed or missing answer
        return ApiReport(problems=[f"the server answered unexpectedly: {exc!r}"])


def run_serve(engine: Engine) -> CheckResult:
    """`vllm serve` on a free loopback port: models, completions, chat, streaming, /metrics."""
    log = engine.logs / "serve.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    how: list[str | Path] = (
        [engine.python.with_name("vllm"), "serve"]
        if engine.use_console_script
        else [engine.python, "-m", API_SERVER, "--model"]
    )
    argv = [
        *how,
        engine.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        MODEL_NAME,
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--kv-cache-memory-bytes",
        str(SERVE_KV_CACHE_BYTES),
    ]
    started = time.monotonic()
    with scratch(engine.env) as place:
        server = Server(argv, env=place.env, cwd=place.folder, log=log)
        try:
            not_ready = server.wait_ready(f"{base}/health", timeout=600)
            ready_seconds = round(time.monotonic() - started, 1)
            report = _exercise(base) if not not_ready else None
        finally:
            server.stop()
    details: dict[str, Any] = {
        "command": "vllm serve" if engine.use_console_script else f"python -m {API_SERVER}",
        "ready_seconds": ready_seconds,
        "log": str(log),
        "cleaned": place.removed,
    }
    if report is None:
        return CheckResult(
            name="serve",
            status=FAIL,
            details=details,
            summary=f"{not_ready}: {root_error(run.tail(log, 60))}",
            fix=f"read {log}",
        )
    details.update(report.details)
    if report.problems:
        return CheckResult(
            name="serve",
            status=FAIL,
            details=details,
            summary="; ".join(report.problems),
            fix=f"read {log}",
        )
    return CheckResult(
        name="serve",
        status=PASS,
        details=details,
        summary=f"{details['command']} ready in {ready_seconds} s on {base}: /v1/models, "
        f"/v1/completions, /v1/chat/completions, streaming; /metrics counted "
        f"{report.prompt_tokens} prompt tokens as the responses did; server stopped",
    )
