"""Each compiler process's peak memory, against the object it produces.

The plan sized every compile job for the heaviest unit of the release. Measured per unit and
summed up per CMake target, the next plan knows which units are heavy (vLLM's kernels) and which
are light (oneDNN) and schedules them apart (toolchain.plan.jobs).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.util.units import MIB

if TYPE_CHECKING:
    from toolchain.compile.compilation import Process

# the processes that hold a unit's memory: the compiler proper and the linker
MEASURED = frozenset({"cc1plus", "cc1", "lto1", "ld", "collect2"})
OUTPUTS = (".o", ".so", ".a", ".gch")  # .gch: a kernel library's precompiled header
TARGET_DIR = re.compile(r"CMakeFiles/([^/]+)\.dir/(.+)$")


def peak_rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The kernel's high-water mark of the process's resident memory (VmHWM)."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def output_of(pid: int, parents: Mapping[int, int], proc: Path = Path("/proc")) -> str | None:
    """The object or library a compiler process works on: the `-o` of itself or the nearest
    ancestor naming one (cc1plus writes a temporary .s; its g++ driver names the object)."""
    for _ in range(4):
        try:
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        for flag, value in itertools.pairwise(argv):
            if flag == b"-o" and value.decode(errors="replace").endswith(OUTPUTS):
                return value.decode(errors="replace")
        if pid not in parents:
            return None
        pid = parents[pid]
    return None


def unit_name(output: str) -> str:
    """`<target>.dir/<source>.o` for CMake's objects, the file name for anything else."""
    match = TARGET_DIR.search(output)
    return f"{match.group(1)}.dir/{match.group(2)}" if match else Path(output).name


def target_of(unit: str) -> str | None:
    return unit.split(".dir/", 1)[0] if ".dir/" in unit else None


@dataclass
class UnitMemory:
    """Peak resident bytes per unit, sampled from the compile's process tree."""

    peaks: dict[str, int] = field(default_factory=dict)
    _outputs: dict[tuple[int, int], str | None] = field(default_factory=dict)

    def sample(self, tree: Sequence[Process], proc: Path = Path("/proc")) -> None:
        parents = {p.pid: p.parent for p in tree}
        for process in tree:
            if process.name not in MEASURED:
                continue
            key = (process.pid, process.started)
            if key not in self._outputs:
                found = output_of(process.pid, parents, proc)
                self._outputs[key] = unit_name(found) if found else None
            unit, peak = self._outputs[key], peak_rss_bytes(process.pid, proc)
            if unit is not None and peak is not None:
                self.peaks[unit] = max(peak, self.peaks.get(unit, 0))

    def by_target(self) -> dict[str, dict[str, int]]:
        """Per CMake target: how many units were measured and the heaviest one's MiB."""
        summary: dict[str, dict[str, int]] = {}
        for unit, peak in self.peaks.items():
            target = target_of(unit)
            if target is None:
                continue
            entry = summary.setdefault(target, {"units": 0, "peak_mib": 0})
            entry["units"] += 1
            entry["peak_mib"] = max(entry["peak_mib"], -(-peak // MIB))
        return dict(sorted(summary.items()))

    def record(self, heaviest: int = 20) -> dict[str, object]:
        """For the manifest: the summary per target, the heaviest units and the links."""
        ranked = sorted(self.peaks.items(), key=lambda item: -item[1])
        return {
            "by_target": self.by_target(),
            "heaviest_units_mib": {unit: -(-peak // MIB) for unit, peak in ranked[:heaviest]},
            "links_mib": {u: -(-p // MIB) for u, p in ranked if target_of(u) is None},
        }
