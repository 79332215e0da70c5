"""The `threads` check: NUMA nodes, affinity and quota, OpenMP runtimes, allocator."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.detect.host import Host
from toolchain.errors import KernelCheckError
from toolchain.verify.checks import Check
from toolchain.verify.environment import probe
from toolchain.verify.results import CheckResult, Findings

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_threads(ctx: Context) -> CheckResult:
    return check_threads(ctx.state.host, _loaded(ctx), ctx.env)


def _loaded(ctx: Context) -> dict[str, Any]:
    """Facts after vLLM loaded its kernels (their OpenMP runtime); without, if that dies."""
    try:
        return probe(ctx.state.python, ctx.clean, dict(os.environ), load_kernels=True)
    except KernelCheckError as exc:
        return {**ctx.facts, "kernels_error": exc.message}


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


CHECK = Check(name="threads", order=60, run=run_threads)
