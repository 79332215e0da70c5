"""How many compile jobs the memory can hold: upstream sizes by cores alone and kills small VMs.

With a recipe's measured model ([[compile_memory]]) the units are weighed: light ones (oneDNN,
up to 1.1 GiB) run in one Ninja pool as many at a time as CPUs and memory allow, heavy ones (vLLM's
kernels, up to 3.8 GiB, and every unmeasured target) in another, after the light ones
(toolchain/data/job-pools.cmake), so the expected peak is the larger of the two, not their sum.

This module owns the sizing: `build_jobs` takes the host, recipe and options and returns the
JobSizing the plan stores; the plan's environment, CMake arguments, render lines and the compile's
memory guard all come from JobSizing's methods, so a change to the rule is an edit here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.detect.host import Host
from toolchain.errors import PlanError
from toolchain.options import BuildOptions
from toolchain.plan.recipes import CompileMemory, Recipe
from toolchain.util.compile_cache import PREPROCESS_MIB
from toolchain.util.units import GIB, MIB, gib

UNMEASURED = "every unmeasured target"


@dataclass(frozen=True, kw_only=True)
class JobPool:
    name: str  # the Ninja pool is vcb_<name>
    jobs: int
    memory_per_job_bytes: int
    what: tuple[str, ...]  # in the user's words: "oneDNN", "vLLM's kernels"
    targets: tuple[str, ...] = ()  # the light pool's CMake targets; heavy is all the others


@dataclass(frozen=True, kw_only=True)
class JobSizing:
    max_jobs: int
    limited_by: str  # "memory", "cpus" or "override"
    cpus: int
    available_bytes: int
    memory_per_job_bytes: int
    reserve_bytes: int
    expected_peak_bytes: int
    warning: str | None = None
    pools: tuple[JobPool, ...] = ()  # empty: every unit sized as the heaviest

    def schedule(self) -> str:
        """The pools in one line: "oneDNN 6 at a time (1.1 GiB each), then vLLM's kernels ..."."""
        return (
            ", then ".join(
                f"{', '.join(p.what)} {p.jobs} at a time ({gib(p.memory_per_job_bytes)} each)"
                for p in self.pools
            )
            + f"; peak {gib(self.expected_peak_bytes)}"
        )

    def env(self) -> dict[str, str]:
        """What tells vLLM's setup.py and cmake the job count."""
        return {"MAX_JOBS": str(self.max_jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(self.max_jobs)}

    def pool_cmake_args(self, pools_cmake: Path) -> list[str]:
        """The CMAKE_ARGS that put the units into the pools of job-pools.cmake (none: one pool)."""
        if not self.pools:
            return []
        light, heavy = self.pools
        return [
            f"-DCMAKE_PROJECT_INCLUDE={pools_cmake}",
            f"-DVCB_LIGHT_JOBS={light.jobs}",
            f"-DVCB_HEAVY_JOBS={heavy.jobs}",
            f"-DVCB_LIGHT_TARGETS={','.join(light.targets)}",
        ]

    def compile_summary(self) -> str:
        """The compile step's "MAX_JOBS=N (the pools)"."""
        return f"MAX_JOBS={self.max_jobs}" + (f" ({self.schedule()})" if self.pools else "")

    def describe(self) -> list[str]:
        """The plan's lines about the jobs."""
        return [
            f"MAX_JOBS {self.max_jobs}: limited by {self.limited_by}; {self.cpus} CPUs, "
            f"{gib(self.available_bytes)} available, {gib(self.memory_per_job_bytes)} per job, "
            f"{gib(self.reserve_bytes)} reserve, expected peak {gib(self.expected_peak_bytes)}",
            *([f"scheduling: {self.schedule()}"] if self.pools else []),
        ]

    def guard_bytes(self) -> tuple[int, int]:
        """The compile's memory guard: pause new compilers below the first figure of available
        memory, resume above the second (room for one more job)."""
        margin = max(512 * MIB, self.reserve_bytes // 2)
        return margin, margin + self.memory_per_job_bytes


def build_jobs(
    host: Host,
    recipe: Recipe,
    options: BuildOptions,
    *,
    arch: str,
    remote_cpus: int = 0,
    measured: bool = True,
) -> JobSizing:
    """The plan's sizing from the facts. With build servers (remote_cpus) a job here only
    preprocesses (and waits), so their CPUs count too; measured=False sizes every unit as the
    recipe's heaviest (its per-unit model was measured elsewhere)."""
    remote = remote_cpus > 0
    return size_jobs(
        cpus=host.cpus_usable + remote_cpus,
        available_bytes=host.memory.usable_bytes,
        memory_per_job_bytes=PREPROCESS_MIB * MIB if remote else recipe.memory_per_job_bytes,
        reserve_bytes=options.reserve_bytes,
        override=options.jobs,
        measured=tuple(m for m in recipe.compile_memory if m.applies_to(arch))
        if measured and not remote
        else (),
    )


def size_jobs(
    *,
    cpus: int,
    available_bytes: int,
    memory_per_job_bytes: int,
    reserve_bytes: int,
    override: int | None = None,
    measured: Sequence[CompileMemory] = (),
) -> JobSizing:
    """jobs = min(cpus, floor((available - reserve) / memory per job)), never below 1; with a
    measured model, light units get as many jobs as their own weight allows."""
    flat = _flat(
        cpus=cpus,
        available_bytes=available_bytes,
        memory_per_job_bytes=memory_per_job_bytes,
        reserve_bytes=reserve_bytes,
        override=override,
    )
    light = [m for m in measured if m.pool == "light"]
    if override is not None or not light:
        return flat
    light_bytes = max(m.peak_bytes for m in light)
    light_jobs = min(cpus, (available_bytes - reserve_bytes) // light_bytes)
    if light_jobs <= flat.max_jobs:
        return flat  # the memory holds as many heavy units as there are CPUs
    heavy = [m.what for m in measured if m not in light]
    pools = (
        JobPool(
            name="light",
            jobs=light_jobs,
            memory_per_job_bytes=light_bytes,
            what=tuple(dict.fromkeys(m.what for m in light)),
            targets=tuple(t for m in light for t in m.targets),
        ),
        JobPool(
            name="heavy",
            jobs=flat.max_jobs,
            memory_per_job_bytes=memory_per_job_bytes,
            what=(*dict.fromkeys(heavy), UNMEASURED),
        ),
    )
    return dataclasses.replace(
        flat,
        max_jobs=light_jobs,
        expected_peak_bytes=reserve_bytes + max(p.jobs * p.memory_per_job_bytes for p in pools),
        pools=pools,
    )


def _flat(
    *,
    cpus: int,
    available_bytes: int,
    memory_per_job_bytes: int,
    reserve_bytes: int,
    override: int | None,
) -> JobSizing:
    fit = (available_bytes - reserve_bytes) // memory_per_job_bytes
    if override is None and fit < 1:
        need = (reserve_bytes + memory_per_job_bytes) / GIB
        raise PlanError(
            f"one compile job needs {need:.1f} GiB ({memory_per_job_bytes / GIB:.1f} GiB for the "
            f"heaviest compiler plus {reserve_bytes / GIB:.1f} GiB reserve) but only "
            f"{available_bytes / GIB:.1f} GiB is available",
            hint="free memory or add swap, or force it with --jobs 1 (the build may be killed)",
        )
    jobs = override if override is not None else min(cpus, fit)
    peak = reserve_bytes + jobs * memory_per_job_bytes
    warning = None
    if override is not None and peak > available_bytes:
        warning = (
            f"MAX_JOBS={override} can need {peak / GIB:.1f} GiB at its peak but "
            f"{available_bytes / GIB:.1f} GiB is available: the kernel may kill compilers; "
            f"{max(1, min(cpus, fit))} would fit"
        )
    limited_by = "override" if override is not None else ("memory" if fit < cpus else "cpus")
    return JobSizing(
        max_jobs=jobs,
        limited_by=limited_by,
        cpus=cpus,
        available_bytes=available_bytes,
        memory_per_job_bytes=memory_per_job_bytes,
        reserve_bytes=reserve_bytes,
        expected_peak_bytes=peak,
        warning=warning,
    )
