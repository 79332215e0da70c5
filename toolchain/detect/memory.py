"""Memory as a build sees it: the kernel's MemAvailable or the cgroup's headroom, the lesser."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import DataFileError
from toolchain.util.cgroup import cgroup_dirs, read_int
from toolchain.util.datafile import read_text
from toolchain.util.units import KIB

# cgroup v2 and v1 files: (limit, usage). v1 reports "no limit" as a huge page-rounded number.
CGROUP_FILES = (
    ("memory.max", "memory.current"),
    ("memory.limit_in_bytes", "memory.usage_in_bytes"),
)
V1_UNLIMITED = 1 << 60


@dataclass(frozen=True, kw_only=True)
class Memory:
    total_bytes: int
    available_bytes: int
    limit_bytes: int | None = None
    usage_bytes: int | None = None

    @property
    def usable_bytes(self) -> int:
        """What a new process can still take: MemAvailable, or less when a cgroup caps us."""
        if self.limit_bytes is None:
            return self.available_bytes
        headroom = self.limit_bytes - (self.usage_bytes or 0)
        return max(0, min(self.available_bytes, headroom))


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per key."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = KIB if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = int(parts[0]) * scale
    return values


def cgroup_memory(proc_self_cgroup: Path, cgroup_root: Path) -> tuple[int | None, int | None]:
    """(limit, usage) of the tightest cgroup around this process, or (None, None)."""
    limit: int | None = None
    usage: int | None = None
    for folder in cgroup_dirs("memory", proc_self_cgroup, cgroup_root):
        for limit_name, usage_name in CGROUP_FILES:
            this_limit = read_int(folder / limit_name)
            if this_limit is None or this_limit >= V1_UNLIMITED:
                continue
            if limit is None or this_limit < limit:
                limit, usage = this_limit, read_int(folder / usage_name)
    return limit, usage


def read_memory(
    meminfo: Path = Path("/proc/meminfo"),
    proc_self_cgroup: Path | None = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> Memory:
    """This machine's memory; pass proc_self_cgroup=None for a saved meminfo of another machine."""
    info = parse_meminfo(read_text(meminfo))
    for field in ("MemTotal", "MemAvailable"):
        if not info.get(field):
            raise DataFileError(
                f"{meminfo}: no positive {field} line; not a /proc/meminfo of Linux 3.14 or newer"
            )
    total, available = info["MemTotal"], info["MemAvailable"]
    limit, usage = (None, None)
    if proc_self_cgroup is not None:
        limit, usage = cgroup_memory(proc_self_cgroup, cgroup_root)
    return Memory(
        total_bytes=total, available_bytes=available, limit_bytes=limit, usage_bytes=usage
    )
