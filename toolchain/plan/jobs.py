"""How many compile jobs the memory can hold: upstream sizes by cores alone and kills small VMs."""

from __future__ import annotations

from dataclasses import dataclass

from toolchain.errors import PlanError
from toolchain.util.units import GIB


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


def size_jobs(
    *,
    cpus: int,
    available_bytes: int,
    memory_per_job_bytes: int,
    reserve_bytes: int,
    override: int | None = None,
) -> JobSizing:
    """jobs = min(cpus, floor((available - reserve) / memory per job)), never below 1."""
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
