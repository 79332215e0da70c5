"""`verify`: prove a vLLM CPU wheel works on this machine, and say what to do where it does not."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.detect.host import Host, detect_host
from toolchain.emulate.decide import EMULATED, REFUSED, decide
from toolchain.emulate.needs import WheelNeeds
from toolchain.emulate.root import missing_tools
from toolchain.errors import UnsupportedHostError
from toolchain.runtime_deps import PipSources, RuntimePlan
from toolchain.util.datafile import load_json
from toolchain.util.files import file_lock
from toolchain.util.report import reporter
from toolchain.verify.checks import Check
from toolchain.verify.context import Context
from toolchain.verify.environment import create_env, probe, wheel_from_index
from toolchain.verify.memflag import DEFAULT_UTILIZATION
from toolchain.verify.registry import CHECK_NAMES, CHECKS
from toolchain.verify.results import SKIP, CheckResult, worst
from toolchain.wheelfile import MANIFEST_NAME, read_manifest

LOCK_NAME = ".verify.lock"


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
    """Every check of `options.only` against the environment of `state.python`, in order."""
    started = time.monotonic()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="vcb-verify-") as folder:
        facts = probe(state.python, Path(folder), env)
        context = Context(
            state=state,
            facts=facts,
            env=env,
            clean=Path(folder),
            manifest=read_manifest(state.wheel) if state.wheel else _installed_manifest(facts),
            substitute_torch=substitute_torch,
        )
        for check in CHECKS:
            _run_check(context, check)
    state.checks_seconds = time.monotonic() - started


def _run_check(context: Context, check: Check) -> None:
    state = context.state
    if state.emulation is not None and check.emulated:
        state.skipped.setdefault(check.name, check.emulated)
    if check.engine and context.prepared is None:
        context.prepare_engines()
    reason = check.skip(context) if check.skip else ""
    result = state.record(
        check.name,
        lambda: (
            CheckResult(name=check.name, status=SKIP, summary=reason)
            if reason
            else check.run(context)
        ),
    )
    if result is not None:
        context.results[check.name] = result


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


def _installed_manifest(facts: dict[str, Any]) -> dict[str, Any] | None:
    site = Path(facts["vllm_package"]).parent
    for path in site.glob(f"*.dist-info/{MANIFEST_NAME}"):
        data: dict[str, Any] = load_json(path)
        return data
    return None
