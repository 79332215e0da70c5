"""Memory and CPUs as a build sees them, from fake /proc and /sys trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.detect.cpus import cgroup_cpu_quota
from toolchain.detect.memory import Memory, cgroup_memory, parse_meminfo, read_memory
from toolchain.util.units import GIB

MEMINFO = Path(__file__).resolve().parents[2] / "fixtures" / "meminfo"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_parses_meminfo_in_bytes() -> None:
    values = parse_meminfo(
        "MemTotal:        8126464 kB\nMemAvailable:    4886364 kB\nHugePages_Total:       0\n"
    )
    assert values["MemTotal"] == 8126464 * 1024
    assert values["MemAvailable"] == 4886364 * 1024
    assert values["HugePages_Total"] == 0


def test_saved_meminfo_has_no_cgroup() -> None:
    memory = read_memory(MEMINFO / "seed-6cpu-7.75g.txt", proc_self_cgroup=None)
    assert memory.total_bytes == pytest.approx(7.75 * GIB, rel=0.001)
    assert memory.available_bytes == pytest.approx(4.66 * GIB, rel=0.001)
    assert memory.limit_bytes is None


def test_cgroup_v2_limit_caps_what_is_usable(tmp_path: Path) -> None:
    proc = tmp_path / "self-cgroup"
    _write(proc, "0::/build.slice/job\n")
    root = tmp_path / "cgroup"
    _write(root / "cgroup.controllers", "cpu memory\n")
    _write(root / "build.slice" / "job" / "memory.max", "max\n")
    _write(root / "build.slice" / "memory.max", str(6 * GIB) + "\n")
    _write(root / "build.slice" / "memory.current", str(2 * GIB) + "\n")
    limit, usage = cgroup_memory(proc, root)
    assert (limit, usage) == (6 * GIB, 2 * GIB)
    memory = Memory(
        total_bytes=64 * GIB, available_bytes=50 * GIB, limit_bytes=limit, usage_bytes=usage
    )
    assert memory.usable_bytes == 4 * GIB


def test_cgroup_v1_memory_controller(tmp_path: Path) -> None:
    proc = tmp_path / "self-cgroup"
    _write(proc, "4:memory:/docker/abc\n0::/\n")
    root = tmp_path / "cgroup"
    _write(root / "memory" / "docker" / "abc" / "memory.limit_in_bytes", str(3 * GIB))
    _write(root / "memory" / "docker" / "abc" / "memory.usage_in_bytes", str(1 * GIB))
    _write(root / "memory" / "memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_memory(proc, root) == (3 * GIB, 1 * GIB)


def test_no_cgroup_limit(tmp_path: Path) -> None:
    proc = tmp_path / "self-cgroup"
    _write(proc, "4:memory:/\n")
    _write(tmp_path / "cgroup" / "memory" / "memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_memory(proc, tmp_path / "cgroup") == (None, None)


def test_available_is_the_smaller_of_kernel_and_cgroup() -> None:
    assert Memory(total_bytes=8, available_bytes=5, limit_bytes=10, usage_bytes=2).usable_bytes == 5
    assert Memory(total_bytes=8, available_bytes=5, limit_bytes=4, usage_bytes=2).usable_bytes == 2
    assert Memory(total_bytes=8, available_bytes=5, limit_bytes=4, usage_bytes=9).usable_bytes == 0


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.cfs_quota_us": "200000\n", "cpu.cfs_period_us": "100000\n"}, 2.0),
        ({"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"}, None),
    ],
)
def test_cgroup_cpu_quota(tmp_path: Path, files: dict[str, str], expected: float | None) -> None:
    proc = tmp_path / "self-cgroup"
    v2 = "cpu.max" in files
    _write(proc, "0::/job\n" if v2 else "3:cpu,cpuacct:/job\n")
    root = tmp_path / "cgroup"
    if v2:
        _write(root / "cgroup.controllers", "cpu\n")
    folder = root / "job" if v2 else root / "cpu,cpuacct" / "job"
    for name, text in files.items():
        _write(folder / name, text)
    assert cgroup_cpu_quota(proc, root) == expected
