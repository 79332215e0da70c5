"""CPU features where neither the probe nor /proc/cpuinfo can answer (a Mac: detect/sysctl.py)."""

from __future__ import annotations

from toolchain.detect.proc_cpuinfo import CpuInfo
from toolchain.util.platform import machine_arch


def py_cpuinfo() -> CpuInfo:
    import cpuinfo  # py-cpuinfo; imported here since it is slow to import

    info = cpuinfo.get_cpu_info()
    return CpuInfo(
        arch=machine_arch(),
        model=str(info.get("brand_raw", "")),
        tokens=frozenset(str(flag) for flag in info.get("flags", [])),
        processors=int(info.get("count", 1)),
        vendor=str(info.get("vendor_id_raw", "")),
    )
