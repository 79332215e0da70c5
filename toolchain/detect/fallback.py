"""CPU features where neither the probe nor /proc/cpuinfo can answer (macOS, other systems)."""

from __future__ import annotations

from toolchain.detect.proc_cpuinfo import CpuInfo
from toolchain.errors import ToolchainError
from toolchain.util import run
from toolchain.util.platform import machine_arch

# macOS sysctl keys and the /proc/cpuinfo tokens they stand for.
SYSCTL_TOKENS = {
    "hw.optional.neon": ("asimd",),
    "hw.optional.arm.FEAT_FP16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_DotProd": ("asimddp",),
    "hw.optional.arm.FEAT_BF16": ("bf16",),
    "hw.optional.arm.FEAT_I8MM": ("i8mm",),
    "hw.optional.avx2_0": ("avx2",),
    "hw.optional.avx512f": ("avx512f",),
}


def sysctl_cpuinfo() -> CpuInfo:
    tokens: set[str] = set()
    for key, names in SYSCTL_TOKENS.items():
        try:
            answer = run.capture(["sysctl", "-n", key], timeout=10).stdout.strip()
        except ToolchainError:
            continue
        if answer.isdigit() and int(answer) > 0:
            tokens.update(names)
    brand = run.capture(["sysctl", "-n", "machdep.cpu.brand_string"], check=False).stdout.strip()
    return CpuInfo(arch=machine_arch(), model=brand, tokens=frozenset(tokens), processors=1)


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
