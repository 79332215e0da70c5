"""`verify`: prove a vLLM CPU wheel works on this machine, and say what to do where it does not."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolchain.detect.host import Host, detect_host
from toolchain.emulate.decide import EMULATED, REFUSED, decide
from toolchain.emulate.needs import WheelNeeds
from toolchain.emulate.root import missing_tools
from toolchain.errors import KernelCheckError, UnsupportedHostError
from toolchain.runtime_deps import PipSources, RuntimePlan
from toolchain.util import run
from toolchain.util.datafile import load_json
from toolchain.util.files import file_lock
from toolchain.util.report import reporter
from toolchain.verify.engine_checks import SCRIPTS, Engine, run_generate, run_serve
from toolchain.verify.environment import check_install, create_env, probe, wheel_from_index
from toolchain.verify.installed_checks import (
    check_import,
    check_isa,
    check_memory,
    check_spawn,
    check_threads,
    console_state,
    run_kernel_loads,
)
from toolchain.verify.memflag import DEFAULT_UTILIZATION, node_memory, reservation
from toolchain.verify.numerics import check_numerics
from toolchain.verify.results import FAIL, SKIP, CheckResult, worst
from toolchain.verify.spawn_lint import lint_scripts
from toolchain.verify.symbols import check_symbols, kernel_symbols
from toolchain.wheelfile import MANIFEST_NAME, read_manifest

LOCK_NAME = ".verify.lock"
CHECK_NAMES = (
    "install",
    "symbols",
    "isa",
    "numerics",
    "import",
    "threads",
    "generate",
    "memory",
    "spawn",
    "serve",
)


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    work_dir: Path
    project: Path
    wheel: Path | None = None
    index_url: str | None = None
    package: str = "vllm"
    python: Path | None = None
    model: Path | None = None
    scripts: tuple[Path, ...] = ()
    utilization: float = DEFAULT_UTILIZATION
    only: tuple[str, ...] = CHECK_NAMES
    sources: PipSources = field(default_factory=PipSources)
    emulate_cpu: str = "max"  # QEMU's CPU model for a wheel of another architecture


@dataclass
class Verification:
    options: VerifyOptions
    host: Host
    python: Path = Path()
    wheel: Path | None = None
    deps: RuntimePlan | None = None
    results: list[CheckResult] = field(default_factory=list)
    install_seconds: float = 0.0
    checks_seconds: float = 0.0  # wall time after the install, probes and model included
    emulation: dict[str, Any] | None = None  # how the wheel ran under qemu, when it did
    needs: WheelNeeds | None = None  # the wheel's needs when read from the wheel file
    skipped: dict[str, str] = field(default_factory=dict)  # check -> why it is not run
    symbols: CheckResult | None = None  # found before the checks (emulated: before any load)
    root: Path = Path("/")  # where the environment's paths are, seen from here (emulated root)
    engine_timeout: float = 900.0
    engine_kv_cache_bytes: int = 0  # emulated: a small fixed KV cache, the flag judged by figures
    engine_eager: bool = False  # emulated: no torch.compile

    @property
    def logs(self) -> Path:
        return self.options.work_dir / "verify"

    def record(self, name: str, check: Callable[[], CheckResult]) -> CheckResult | None:
        if name not in self.options.only:
            return None
        reporter.heading(name)
        started = time.monotonic()
        result = (self._skip(name) if name in self.skipped else check()).timed(
            time.monotonic() - started
        )
        reporter.outcome(f"{result.status}: {result.summary}")
        self.results.append(result)
        return result

    def nothing(self) -> CheckResult:  # a check in `skipped` records its reason instead
        return CheckResult(name="", status=SKIP, summary="")

    def _skip(self, name: str) -> CheckResult:
        return CheckResult(name=name, status=SKIP, summary=self.skipped[name])

    def to_json(self) -> dict[str, Any]:
        return {
            "status": worst(self.results),
            "wheel": str(self.wheel) if self.wheel else None,
            "python": str(self.python),
            "host": {"cpu": self.host.cpu_model, "isa_level": self.host.isa_level},
            "emulation": self.emulation,
            "install_seconds": round(self.install_seconds, 1),
            "checks_seconds": round(self.checks_seconds, 1),
            "checks": [r.to_json() for r in self.results],
        }


def verify(options: VerifyOptions) -> Verification:
    host = detect_host()
    decision = None
    if options.wheel is not None and options.python is None:
        decision = decide(options.wheel.name, host.arch, missing_tools=missing_tools)
        if decision.mode == REFUSED:
            raise UnsupportedHostError(
                f"cannot verify {options.wheel.name} here: {decision.reason}",
                hint="verify it on a machine of its architecture",
            )
    state = Verification(options=options, host=host)
    state.logs.mkdir(parents=True, exist_ok=True)
    # one verify per work folder, emulated or not: another would delete the venv and logs this
    # one is using
    with file_lock(state.logs / LOCK_NAME, what="verify", wait=False):
        if decision is not None and decision.mode == EMULATED:
            from toolchain.verify.emulated import verify_emulated  # only when emulating

            return verify_emulated(options, decision, host)
        prepare_env(state)
        run_checks(state)
    return state


def run_checks(state: Verification, *, substitute_torch: str = "") -> None:
    """Every check of `options.only` against the environment of `state.python`."""
    options = state.options
    started = time.monotonic()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="vcb-verify-") as folder:
        clean = Path(folder)  # nothing in it can shadow vllm
        facts = probe(state.python, clean, env)
        manifest = read_manifest(state.wheel) if state.wheel else _installed_manifest(facts)
        state.record(
            "install",
            lambda: check_install(
                facts, manifest=manifest, deps=state.deps, substitute_torch=substitute_torch
            ),
        )
        state.record("symbols", lambda: state.symbols or _native_symbols(state, facts))
        min_isa, target = _wheel_needs(manifest)
        if state.needs is not None:
            min_isa, target = list(state.needs.features), state.needs.source
        isa = state.record(
            "isa",
            lambda: check_isa(
                state.host,
                run_kernel_loads(state.python, facts, state.host, clean, min_isa, state.root),
                min_isa,
                target,
            ),
        )
        state.record(
            "numerics", lambda: check_numerics(state.python, facts, clean, isa, state.root)
        )
        wanted = {"import", "serve"} & set(options.only)
        console = console_state(state.python, env) if wanted else "not checked"
        state.record(
            "import", lambda: check_import(state.python, facts, options.project, env, console)
        )
        state.record(
            "threads", lambda: check_threads(state.host, _loaded(state, clean, facts), env)
        )
    run_engines(state, facts, env, console_works=console == "works")
    state.checks_seconds = time.monotonic() - started


def _native_symbols(state: Verification, facts: dict[str, Any]) -> CheckResult:
    site = Path(facts["vllm_package"]).parent
    interpreter = Path(os.path.realpath(facts.get("python") or state.python))
    missing = kernel_symbols(site, interpreter=interpreter, arch=state.host.arch)
    if missing is None:
        return CheckResult(
            name="symbols",
            status=SKIP,
            summary="readelf is not installed (apt-get install binutils)",
        )
    return check_symbols(missing)


def _loaded(state: Verification, clean: Path, facts: dict[str, Any]) -> dict[str, Any]:
    """Facts after vLLM loaded its kernels (their OpenMP runtime); without, if that dies."""
    try:
        return probe(state.python, clean, dict(os.environ), load_kernels=True)
    except KernelCheckError as exc:
        return {**facts, "kernels_error": exc.message}


def prepare_env(state: Verification) -> None:
    options = state.options
    if options.python is not None:
        state.python = options.python
        return
    started = time.monotonic()
    log = state.logs / "install.log"
    state.wheel = options.wheel or wheel_from_index(
        options.index_url or "", options.package, state.logs / "download", log
    )
    venv = state.logs / "venv"
    reporter.heading(f"environment: a new venv at {venv} (log: {log})")
    state.deps = create_env(state.wheel, venv, options.sources, log)
    state.python = venv / "bin" / "python"
    state.install_seconds = time.monotonic() - started
    reporter.outcome(f"installed in {state.install_seconds:.0f} s")


def _wheel_needs(manifest: dict[str, Any] | None) -> tuple[list[str], str]:
    """min_isa and target from the build manifest (in the wheel or its installed dist-info)."""
    if manifest is None:
        return [], "no build manifest: needs read from its kernel libraries"
    return list(manifest.get("min_isa", [])), f"target {manifest.get('target_isa')}"


def _installed_manifest(facts: dict[str, Any]) -> dict[str, Any] | None:
    site = Path(facts["vllm_package"]).parent
    for path in site.glob(f"*.dist-info/{MANIFEST_NAME}"):
        data: dict[str, Any] = load_json(path)
        return data
    return None


def run_engines(
    state: Verification, facts: dict[str, Any], env: dict[str, str], *, console_works: bool
) -> None:
    options = state.options
    memory = node_memory()
    planned = reservation(memory, options.utilization)
    default = reservation(memory, DEFAULT_UTILIZATION)
    utilization = planned.utilization if planned.leaves_margin else planned.recommended_utilization
    engine_env = dict(env)
    if facts["platform"]["device_type"] != "cpu":
        engine_env["VLLM_TARGET_DEVICE"] = "cpu"  # so the rest can still be checked
    needs_engine = {"generate", "serve"} & set(options.only)
    engine = Engine(
        python=state.python,
        model=options.model or (_tiny_model(state) if needs_engine else Path()),
        utilization=utilization,
        env=engine_env,
        logs=state.logs,
        use_console_script=console_works,
        timeout=state.engine_timeout,
        kv_cache_bytes=state.engine_kv_cache_bytes,
        eager=state.engine_eager,
    )
    attempts: list[dict[str, Any]] = []
    generated = state.record("generate", lambda: generate_with_retry(engine, attempts))
    proof = dict(generated.details) if generated else None
    proven = generated is not None and not state.engine_kv_cache_bytes
    state.record(
        "memory", lambda: check_memory(memory, planned, default, attempts if proven else None)
    )
    findings = lint_scripts(options.scripts)
    state.record("spawn", lambda: check_spawn(findings, len(options.scripts), proof))
    if generated is not None and generated.status == FAIL:
        state.record(
            "serve",
            lambda: CheckResult(
                name="serve", status=SKIP, summary="not started: the engine failed in generate"
            ),
        )
        return
    state.record("serve", lambda: run_serve(engine))


def generate_with_retry(engine: Engine, attempts: list[dict[str, Any]]) -> CheckResult:
    """generate; when vLLM refuses the memory setting, once more with a setting that fits now.

    The memory check reports the refusal; the retry still proves generate, spawn and serve.
    """
    result = run_generate(engine)
    attempts.append(dict(result.details))
    if not result.details.get("memory_refused"):
        return result
    lower = reservation(node_memory(), engine.utilization).recommended_utilization
    if not 0 < lower < engine.utilization:
        return result
    reporter.outcome(
        f"vLLM refused --gpu-memory-utilization {engine.utilization} "
        f"({result.details.get('memory_seen') or 'see the log'}); retrying with {lower}"
    )
    refused_log = Path(result.details["log"]).with_name("generate-refused.log")
    Path(result.details["log"]).replace(refused_log)
    attempts[0]["log"] = str(refused_log)
    retry = run_generate(replace(engine, utilization=lower))
    attempts.append(dict(retry.details))
    refused = f"vLLM refused --gpu-memory-utilization {engine.utilization}"
    return replace(
        retry,
        summary=f"with --gpu-memory-utilization {lower} after {refused}: {retry.summary}",
        details={**retry.details, "refused_first": attempts[0]},
    )


def _tiny_model(state: Verification) -> Path:
    model = state.logs / "tiny-model"
    if not (model / "config.json").is_file():
        shutil.rmtree(model, ignore_errors=True)
        run.run_logged(
            [state.python, SCRIPTS / "make_tiny_model.py", model],
            log=state.logs / "install.log",
            what="making the tiny model",
        )
    return model
