"""`verify` of a wheel for another architecture: under qemu-user, in a Debian root of its own.

The order protects the machine and the user's time: the wheel's needs are read from the wheel
file and weighed against the emulated CPU before anything is installed, so a wheel the CPU cannot
run is refused with the reason instead of dying by SIGILL; missing symbols are named before any
load; the OpenAI server is not started (see checks/serve.py's EMULATED).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolchain.detect.host import Host, detect_host
from toolchain.emulate.decide import Decision
from toolchain.emulate.install import (
    VENV_IN_ROOT,
    TorchChoice,
    choose_torch,
    install_into_root,
    requirements_for,
)
from toolchain.emulate.models import cpu_model
from toolchain.emulate.needs import wheel_needs
from toolchain.emulate.root import RootPlan, ensure_binfmt, ensure_root, plan_root
from toolchain.emulate.session import EmulatedCpu, Wrappers, probe_cpu, write_cpuinfo
from toolchain.emulate.standins import build_stand_ins
from toolchain.errors import ToolMissingError
from toolchain.util.report import reporter
from toolchain.verify.engine_checks import SCRIPTS, SERVE_KV_CACHE_BYTES
from toolchain.verify.flow import Verification, VerifyOptions, run_checks
from toolchain.verify.registry import CHECK_NAMES
from toolchain.verify.results import FAIL, CheckResult
from toolchain.verify.symbols import MissingSymbols, check_symbols, kernel_symbols

# generate under qemu: every process imports torch and vLLM emulated. Its engine gets serve's
# 1 GiB KV cache: reserving most of the machine's memory under emulation proves no more about the
# flag than the memory check's figures (the memory check says it was not proven by an engine).
# It runs eager: torch.compile of even the tiny model under qemu takes most of the budget.
ENGINE_TIMEOUT = 1800.0
STAND_INS = Path("/opt/vcb-verify/stand-ins/libvcb-stand-ins.so")  # inside the root


def verify_emulated(options: VerifyOptions, decision: Decision, machine: Host) -> Verification:
    """`machine`: this machine, whose CPUs, NUMA nodes and memory the emulated process has."""
    assert options.wheel is not None and decision.root is not None
    logs = options.work_dir / "verify"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "install.log"
    plan = plan_root(decision.root, options.work_dir)
    model = cpu_model(options.emulate_cpu)
    reporter.heading(f"emulated: {decision.root.qemu}, CPU model {model.name} ({model.summary})")
    ensure_binfmt(plan.spec)
    record = ensure_root(plan, log)
    cpu = probe_cpu(plan, model)
    cpuinfo = write_cpuinfo(cpu, logs / "emulated" / "cpuinfo", os.cpu_count() or 1)
    state = Verification(options=options, host=_emulated_host(cpuinfo, machine))
    state.wheel = options.wheel
    state.needs = wheel_needs(options.wheel, plan.spec.arch)
    state.emulation = _describe(plan, cpu, record, decision)
    lacking = [f for f in state.needs.features if not state.host.isa.get(f)]
    if lacking:
        _refuse(state, lacking)
        return state
    started = time.monotonic()
    deps = requirements_for(options.wheel, plan.spec)
    deps, torch = choose_torch(deps, plan.spec, options.sources, logs / "download", log)
    venv = install_into_root(options.wheel, plan, deps, options.sources, log)
    state.deps = deps
    state.install_seconds = time.monotonic() - started
    reporter.outcome(f"installed in {state.install_seconds:.0f} s")
    missing = _missing(plan, venv)
    preload = _stand_ins(plan, missing, torch, log)
    state.python = Wrappers(
        folder=logs / "emulated" / "bin",
        plan=plan,
        venv=VENV_IN_ROOT,
        cpuinfo=cpuinfo,
        cpu=cpu,
        binds=_binds(options, logs),
        preload=preload,
    ).write()
    state.emulation["torch"] = torch.note if torch else "none required"
    state.emulation["stand_ins"] = sorted(s for m in missing for s in m.symbols) if preload else []
    state.root = plan.path
    state.engine_timeout = ENGINE_TIMEOUT
    state.engine_kv_cache_bytes = SERVE_KV_CACHE_BYTES
    state.engine_eager = True
    checks_started = time.monotonic()
    state.symbols = check_symbols(missing, stand_ins=preload)
    run_checks(state, substitute_torch=torch.note if torch and torch.substitute else "")
    state.checks_seconds = time.monotonic() - checks_started
    return state


def _emulated_host(cpuinfo: Path, machine: Host) -> Host:
    """The emulated CPU's features and name, with this machine's CPUs, NUMA nodes and memory."""
    return replace(
        detect_host(cpuinfo_file=cpuinfo),
        cpus_usable=machine.cpus_usable,
        cpu_quota=machine.cpu_quota,
        numa_nodes=machine.numa_nodes,
        memory=machine.memory,
    )


def _describe(
    plan: RootPlan, cpu: EmulatedCpu, record: dict[str, Any], decision: Decision
) -> dict[str, Any]:
    return {
        "summary": f"emulated: {plan.spec.qemu}, CPU model {cpu.model.name}",
        "why": decision.reason,
        "qemu_cpu": cpu.model.qemu_cpu,
        "hwcap": hex(cpu.hwcap),
        "hwcap2": hex(cpu.hwcap2),
        "root": str(plan.path),
        "root_identity": record["identity"],
        "root_suite": f"Debian {record['suite']} {record['arch']}",
    }


def _refuse(state: Verification, lacking: list[str]) -> None:
    """The wheel cannot run on this CPU model: say so, install nothing, load nothing."""
    assert state.needs is not None and state.emulation is not None
    model = state.emulation["summary"].rsplit(" ", 1)[-1]
    reason = (
        f"refused before install: CPU model {model} lacks {', '.join(lacking)}, which the wheel "
        f"needs (from {state.needs.source}); loading it would die by SIGILL"
    )
    state.record(
        "isa",
        lambda: CheckResult(
            name="isa",
            status=FAIL,
            summary=reason,
            fix="verify with an --emulate-cpu model that has them (max), or on this CPU use a "
            "wheel built for it (nox -s plan -- --cpuinfo its /proc/cpuinfo names the target)",
            details={
                "needs": list(state.needs.features) if state.needs else [],
                "lacking": lacking,
            },
        ),
    )
    for name in CHECK_NAMES:
        if name != "isa":
            state.skipped[name] = "not run: the wheel was refused for this CPU before install"
            state.record(name, state.nothing)


def _binds(options: VerifyOptions, logs: Path) -> tuple[Path, ...]:
    """Host folders the checks pass paths in, bound at the same paths inside the root."""
    folders = [logs, SCRIPTS, Path("/tmp"), options.project]
    if options.model is not None:
        folders.append(options.model.resolve())
    folders += [path.resolve() for path in options.scripts]
    return tuple(dict.fromkeys(f if f.is_dir() else f.parent for f in folders))


def _missing(plan: RootPlan, venv: Path) -> list[MissingSymbols]:
    site = venv / "lib" / f"python{plan.spec.python}" / "site-packages"
    interpreter = plan.path / "usr" / "bin" / f"python{plan.spec.python}"
    found = kernel_symbols(site, interpreter=interpreter, arch=plan.spec.arch, root=plan.path)
    if found is None:
        raise ToolMissingError(
            "readelf was not found: it names the symbols a kernel library lacks before loading",
            hint="apt-get install binutils",
        )
    return found


def _stand_ins(
    plan: RootPlan, missing: list[MissingSymbols], torch: TorchChoice | None, log: Path
) -> str:
    """Aborting stand-ins for the missing functions, only when they are missing because the
    torch under test is a substitute; '' when none are made."""
    functions = {n: k for m in missing for n, k in m.symbols.items() if k == "FUNC"}
    if not functions or torch is None or not torch.substitute:
        return ""
    out = plan.path / STAND_INS.relative_to("/")
    out.parent.mkdir(parents=True, exist_ok=True)
    build_stand_ins(functions, plan.spec.arch, out, log)
    return str(STAND_INS)
