"""CPUs this process may use: its affinity mask, then any cgroup CPU quota."""

from __future__ import annotations

import math
import os
from pathlib import Path

from toolchain.util.cgroup import cgroup_dirs, read_int


def cgroup_cpu_quota(proc_self_cgroup: Path, cgroup_root: Path) -> float | None:
    """The tightest quota in CPUs (cpu.max, or cpu.cfs_quota_us / cpu.cfs_period_us)."""
    quota: float | None = None
    for folder in cgroup_dirs("cpu", proc_self_cgroup, cgroup_root):
        this = _quota_of(folder)
        if this is not None and (quota is None or this < quota):
            quota = this
    return quota


def _quota_of(folder: Path) -> float | None:
    try:
        parts = (folder / "cpu.max").read_text().split()
    except OSError:
        parts = []
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]) / int(parts[1])
    v1_quota = read_int(folder / "cpu.cfs_quota_us")
    v1_period = read_int(folder / "cpu.cfs_period_us")
    if v1_quota is not None and v1_quota > 0 and v1_period:
        return v1_quota / v1_period
    return None


def usable_cpus(
    proc_self_cgroup: Path = Path("/proc/self/cgroup"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> tuple[int, float | None]:
    """(CPUs this process may run on, the cgroup quota in CPUs or None)."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_cpu_quota(proc_self_cgroup, cgroup_root)
    count = affinity or 1
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return count, quota
