"""verify's checks of a machine and an installed vLLM that need no running engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolchain.detect.host import Host
from toolchain.util import run
from toolchain.util.units import gib
from toolchain.verify.kernels import KernelLoad, describe, find_package, load_kernels, picked_tier
from toolchain.verify.memflag import NodeMemory, Reservation, describe_node
from toolchain.verify.results import FAIL, PASS, SKIP, WARN, CheckResult, Findings
from toolchain.verify.shadowing import check_shadowing
from toolchain.verify.spawn_lint import Finding

REBUILD = (
    "build on this machine (nox -s build-wheel picks the best target this CPU runs), or install "
    "the variant for it (python -m toolchain install-command)"
)


def check_isa(
    host: Host, loads: Sequence[KernelLoad], min_isa: Sequence[str], target: str
) -> CheckResult:
    """The host has what the wheel needs; the tier vLLM picks here loads without SIGILL."""
    lacking = [feature for feature in min_isa if not host.isa.get(feature)]
    details: dict[str, Any] = {
        "min_isa": list(min_isa),
        "loads": {load.library: load.status for load in loads},
    }
    if lacking:
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary=f"this CPU lacks {', '.join(lacking)}, which the wheel ({target}) needs",
            fix=REBUILD,
        )
    if not loads:
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary="the installed vllm ships no kernel library (_C*.so): not a CPU build",
            fix="install a vLLM wheel built with VLLM_TARGET_DEVICE=cpu",
        )
    by_tier = {load.tier: load for load in loads}
    tier = picked_tier(host.arch, host.isa, by_tier)
    details["picked"] = tier
    picked = by_tier.get(tier or "")
    others = "; ".join(describe(load) for load in loads if load is not picked)
    if picked is None or picked.status != "ok":
        why = _picked_failure(picked)
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary=f"vLLM loads {tier} on this CPU and it cannot: {why}",
            fix=REBUILD,
        )
    broken = [load for load in loads if load.status == "error"]
    summary = f"vLLM picks {picked.library} here and it loads" + (f"; {others}" if others else "")
    if broken:
        return CheckResult(
            name="isa",
            status=WARN,
            summary=summary,
            details=details,
            fix="a kernel tier for other CPUs is broken: rebuild before publishing this wheel",
        )
    return CheckResult(name="isa", status=PASS, summary=summary, details=details)


def _picked_failure(picked: KernelLoad | None) -> str:
    if picked is None:
        return "vLLM has no tier for this CPU"
    if picked.status == "sigill":
        return f"{picked.library}: killed by SIGILL: this CPU lacks {', '.join(picked.lacking)}"
    return describe(picked)


def run_kernel_loads(
    python: Path,
    facts: Mapping[str, Any],
    host: Host,
    cwd: Path,
    min_isa: Sequence[str],
    root: Path = Path("/"),
) -> list[KernelLoad]:
    """Each kernel library loaded by `python`; `root`: where its paths are, seen from here."""
    package = Path(facts["vllm_package"])
    return load_kernels(
        python,
        package,
        arch=host.arch,
        isa=host.isa,
        wheel_min_isa=tuple(min_isa),
        cwd=cwd,
        root=root,
    )


def check_import(
    python: Path, facts: Mapping[str, Any], project: Path, env: Mapping[str, str], console: str
) -> CheckResult:
    """Nothing in the user's folder shadows vllm; vLLM picks its CPU platform; names intact."""
    found = Findings()
    shadows = [str(shadow) for shadow in check_shadowing(project, env.get("PYTHONPATH", ""))]
    location = find_package(python, project, env)
    if location != facts["vllm_package"]:
        found.fail(
            f"run from {project}, `import vllm` finds {location or 'nothing'} instead of "
            f'{facts["vllm_package"]} ({"; ".join(shadows) or "PYTHONPATH"}): "cannot import '
            f"name 'LLM' from 'vllm' ({location or 'unknown location'})\"",
            "run your scripts from another folder, or rename that vllm folder/module",
        )
    elif shadows:  # a folder without __init__.py: the installed package still wins here
        found.warn(
            f"{'; '.join(shadows)}: harmless with this environment, but a Python without vLLM "
            "run there fails with \"cannot import name 'LLM' from 'vllm' (unknown location)\"",
            "rename the folder, or always run with this environment's Python",
        )
    platform = facts["platform"]
    if platform["device_type"] != "cpu":
        found.fail(
            f"vLLM did not pick its CPU platform ({platform['device_type'] or platform['error']})",
            "its installed version must contain 'cpu' (e.g. 0.32.0+cpu), or export "
            "VLLM_TARGET_DEVICE=cpu",
        )
    distributions = facts["vllm_distributions"]
    if "vllm" not in distributions:
        names = ", ".join(f"{n} {v}" for n, v in distributions.items())
        found.warn(
            f"installed as {names}, not 'vllm': importlib.metadata.version('vllm') fails, so "
            f"the `vllm` command {console}, `vllm run-batch` and plugins "
            "that ask for vllm's version break, and pip may install a second vllm beside it",
            "start the server with `python -m vllm.entrypoints.openai.api_server` instead "
            "of `vllm serve`; install a wheel named vllm to get the command back",
        )
    elif "cpu" not in (distributions["vllm"] or ""):
        found.warn(
            f"version {distributions['vllm']} lacks 'cpu'",
            "export VLLM_TARGET_DEVICE=cpu wherever vLLM runs, or retag the wheel +cpu",
        )
    details = {
        "installed_at": facts["vllm_package"],
        "imports_from_project": location,
        "distributions": distributions,
    }
    summary = f"vllm imports from {facts['vllm_package']}; CPU platform picked"
    return found.result("import", summary, details)


def console_state(python: Path, env: Mapping[str, str]) -> str:
    """'works', 'is missing' or 'fails (...)': the `vllm` command of the environment."""
    command = python.with_name("vllm")
    if not command.is_file():
        return "is missing"
    done = run.capture([command, "--version"], cwd=Path("/"), env=env, check=False, timeout=300)
    last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
    return f"fails ({last[0][:120]})" if done.returncode else "works"


def check_spawn(
    findings: Sequence[Finding], scripts: int, engine: Mapping[str, Any] | None
) -> CheckResult:
    """Scripts start no engine at import time; the engine itself started under spawn."""
    details = {"scripts": scripts, "findings": [str(f) for f in findings], "engine": engine}
    started = bool(engine and engine.get("started"))
    method = (engine or {}).get("start_method")
    engine_words = (
        f"the engine started with the {method} start method"
        if started
        else "the engine was not started (see generate)"
        if engine
        else "the engine was not started (generate not run)"
    )
    if findings:
        return CheckResult(
            name="spawn",
            status=FAIL,
            details=details,
            summary=f"{len(findings)} engine start(s) outside a __main__ guard: "
            + "; ".join(f"{f.path}:{f.line} {f.call}" for f in findings),
            fix='move them into a function called under `if __name__ == "__main__":` '
            "(vLLM's CPU workers are spawned and import the script again)",
        )
    linted = f"{scripts} script(s) have a __main__ guard" if scripts else "no --script given"
    status = PASS if started and method == "spawn" else FAIL if started else SKIP
    return CheckResult(
        name="spawn", status=status, summary=f"{engine_words}; {linted}", details=details
    )


def check_memory(
    memory: NodeMemory,
    planned: Reservation,
    default: Reservation,
    attempts: Sequence[Mapping[str, Any]] | None,
) -> CheckResult:
    """What the flag reserves, whether that leaves the margin, and what an engine start proved.

    `attempts` are generate's engine starts in order (the second a retry with a lower setting
    after vLLM refused the first); None when generate did not run.
    """
    advice = (
        f"--gpu-memory-utilization {planned.recommended_utilization:.2f} "
        f"(or VLLM_CPU_KVCACHE_SPACE={planned.recommended_kvcache_gib})"
    )
    details: dict[str, Any] = {
        "node": memory.node,
        "source": memory.source,
        "total_bytes": memory.total_bytes,
        "available_bytes": memory.available_bytes,
        "system_total_bytes": memory.system_total_bytes,
        "system_available_bytes": memory.system_available_bytes,
        "requested_bytes": planned.requested_bytes,
        "utilization": planned.utilization,
        "margin_bytes": planned.margin_bytes,
        "recommended": planned.recommended_utilization,
        "recommended_kvcache_gib": planned.recommended_kvcache_gib,
        "default_fits": default.leaves_margin,
        "attempts": list(attempts) if attempts is not None else None,
        "proof": attempts[-1] if attempts else None,
    }
    where = describe_node(memory)
    proof_words, status = _proof(attempts or [])
    if not planned.fits:
        return CheckResult(
            name="memory",
            status=FAIL,
            details=details,
            summary=f"--gpu-memory-utilization {planned.utilization} asks for "
            f"{gib(planned.requested_bytes)} on {where}: vLLM refuses to start{proof_words}",
            fix=f"use {advice}; the flag reserves CPU RAM despite its name",
        )
    if not planned.leaves_margin:
        spare = memory.available_bytes - planned.requested_bytes
        return CheckResult(
            name="memory",
            status=FAIL,
            details=details,
            summary=f"--gpu-memory-utilization {planned.utilization} reserves "
            f"{gib(planned.requested_bytes)} of {where}, leaving {gib(spare)}: less than the "
            f"{gib(planned.margin_bytes)} that vLLM's own processes take before it checks, so it "
            f"refuses at start-up{proof_words}",
            fix=f"use {advice}, which leaves {gib(planned.margin_bytes)}",
        )
    worked = _worked(attempts or [])
    fixes = {
        PASS: "",
        SKIP: "",
        WARN: "see the generate check",
        FAIL: f"use --gpu-memory-utilization {worked} (proven by an engine start)"
        if worked
        else f"free memory, or lower --gpu-memory-utilization below {planned.utilization}",
    }
    return CheckResult(
        name="memory",
        status=status,
        details=details,
        summary=f"--gpu-memory-utilization {planned.utilization} reserves "
        f"{gib(planned.requested_bytes)} of {where}{proof_words}",
        fix=fixes[status],
    )


def _worked(attempts: Sequence[Mapping[str, Any]]) -> float | None:
    return next((a.get("utilization") for a in attempts if a.get("started")), None)


def _refusal(attempt: Mapping[str, Any]) -> str:
    setting = f"--gpu-memory-utilization {attempt.get('utilization')}"
    seen = attempt.get("memory_seen")
    return f"vLLM refused {setting}" + (f" ({seen})" if seen else "")


def _proof(attempts: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(words, status) for what generate's engine starts proved about the setting."""
    if not attempts:
        return "", SKIP
    first, last = attempts[0], attempts[-1]
    started = f"the engine started with --gpu-memory-utilization {last.get('utilization')}"
    if len(attempts) > 1 and last.get("started"):
        return f"; {_refusal(first)} at engine start; {started}", FAIL
    if last.get("started"):
        return f"; {started}", PASS
    if len(attempts) > 1 and last.get("memory_refused"):
        return f"; {_refusal(first)}, and the retry: {_refusal(last)}", FAIL
    if last.get("memory_refused"):
        return f"; {_refusal(last)}: memory was taken meanwhile", FAIL
    return "; not proven: the engine failed before it reserved memory", WARN


def check_threads(host: Host, facts: Mapping[str, Any], env: Mapping[str, str]) -> CheckResult:
    """NUMA nodes, affinity and quota, OpenMP binding and runtimes, allocator advice."""
    found = Findings()
    affinity = facts["affinity"]
    runtimes = facts["openmp_runtimes"]
    preloaded = [r for r in runtimes if Path(r).name in env.get("LD_PRELOAD", "")]
    if len(runtimes) > 1 and not preloaded:
        found.fail(
            f"{len(runtimes)} OpenMP runtimes in one process: {', '.join(runtimes)}",
            "keep one: remove the extra runtime, or LD_PRELOAD the one to use (upstream: "
            "Intel OpenMP's libiomp5.so; vLLM preloads torch's libgomp when none is)",
        )
    elif len(runtimes) > 1:
        found.warn(
            f"{len(runtimes)} OpenMP runtimes mapped; the preloaded {Path(preloaded[0]).name} "
            "answers every OpenMP call (upstream's LD_PRELOAD setup)",
            "nothing to do if intended; otherwise remove it from LD_PRELOAD",
        )
    if host.numa_nodes == 0:
        found.warn(
            "the kernel shows no NUMA node (a container?): vLLM sizes memory from "
            "/proc/meminfo and cannot bind threads per node",
            f"set VLLM_CPU_OMP_THREADS_BIND={_cpu_list(affinity)} explicitly",
        )
    if host.cpu_quota is not None and host.cpu_quota < len(affinity):
        usable = max(1, int(host.cpu_quota))
        found.warn(
            f"the cgroup allows {host.cpu_quota:g} CPUs of time but {len(affinity)} "
            "CPUs are in the affinity mask: bound OpenMP threads will be throttled",
            f"set VLLM_CPU_OMP_THREADS_BIND={_cpu_list(affinity[:usable])}",
        )
    omp = env.get("OMP_NUM_THREADS")
    if omp and env.get("VLLM_CPU_OMP_THREADS_BIND", "auto") != "nobind":
        found.warn(
            f"OMP_NUM_THREADS={omp} is ignored while VLLM_CPU_OMP_THREADS_BIND binds",
            "unset OMP_NUM_THREADS, or set VLLM_CPU_OMP_THREADS_BIND=nobind to use it",
        )
    if facts.get("kernels_error"):
        found.warn(
            "OpenMP runtimes counted without vLLM's kernels, which did not load",
            "see the isa check",
        )
    allocator = _tcmalloc_state(facts, env)
    if allocator.startswith("no tcmalloc"):
        found.warn(allocator, _preload_advice(host.arch, facts.get("intel_openmp", [])))
    details = {
        "numa_nodes": host.numa_nodes,
        "affinity": affinity,
        "cpu_quota": host.cpu_quota,
        "openmp_runtimes": runtimes,
        "torch_threads": facts["torch_threads"],
        "allocator": allocator,
    }
    openmp = ", ".join(Path(r).name for r in runtimes) or "none loaded"
    summary = (
        f"{len(affinity)} CPUs ({_cpu_list(affinity)}), NUMA nodes {host.numa_nodes}, "
        f"OpenMP {openmp}"
    )
    if not allocator.startswith("no tcmalloc"):
        summary += f", {allocator}"
    return found.result("threads", summary, details)


def _tcmalloc_state(facts: Mapping[str, Any], env: Mapping[str, str]) -> str:
    if facts["bundled_tcmalloc"]:
        return "tcmalloc bundled with vLLM (it preloads it)"
    if "libtcmalloc" in env.get("LD_PRELOAD", ""):
        return "tcmalloc preloaded"
    return "no tcmalloc: vLLM's CPU docs advise preloading it for speed and memory"


def _preload_advice(arch: str, intel_openmp: Sequence[str]) -> str:
    """Upstream's advice (docs cpu.x86.inc.md): LD_PRELOAD TCMalloc and Intel OpenMP."""
    found = next(
        (p for p in Path("/usr/lib").glob("*/libtcmalloc_minimal.so.4") if arch in str(p)), None
    )
    tcmalloc = str(found or f"/usr/lib/{arch}-linux-gnu/libtcmalloc_minimal.so.4")
    install = "" if found else "apt-get install libtcmalloc-minimal4, then "
    preload = ":".join([tcmalloc, *intel_openmp[:1], "$LD_PRELOAD"])
    return f'{install}export LD_PRELOAD="{preload}"'


def _cpu_list(cpus: Sequence[int]) -> str:
    """0,1,2,5 -> 0-2,5"""
    ranges: list[list[int]] = []
    for cpu in cpus:
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)
