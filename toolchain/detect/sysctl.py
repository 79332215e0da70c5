"""A Mac from `sysctl` and `vm_stat` text: one parser for this Mac's output and saved dumps.

`sysctl -a` (or `sysctl hw machdep kern`) prints `key: value` lines; the CPU features are
`hw.optional.*` booleans, named here by the /proc/cpuinfo tokens they stand for, so the ISA table,
archspec and the targets read a Mac as they read Linux. Available memory comes from `vm_stat`:
free + inactive + speculative pages, as psutil's `virtual_memory().available` on macOS (its free
count is the kernel's, which includes the speculative pages `vm_stat` lists apart): pages the
kernel hands to a new process without compressing or swapping anyone's memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolchain.detect.memory import Memory
from toolchain.detect.proc_cpuinfo import CpuInfo
from toolchain.errors import DataFileError
from toolchain.util import run

# sysctl keys and the /proc/cpuinfo tokens they stand for (older macOS has only the first names)
SYSCTL_TOKENS = {
    "hw.optional.neon": ("asimd",),
    "hw.optional.AdvSIMD": ("asimd",),
    "hw.optional.neon_fp16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_FP16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_DotProd": ("asimddp",),
    "hw.optional.arm.FEAT_BF16": ("bf16",),
    "hw.optional.arm.FEAT_I8MM": ("i8mm",),
    "hw.optional.arm.FEAT_SME": ("sme",),
    "hw.optional.avx2_0": ("avx2",),
    "hw.optional.avx512f": ("avx512f",),
}
# What `detect` asks of this Mac: the same keys a saved `sysctl hw machdep kern` dump has
LIVE_KEYS = ("hw", "machdep", "kern.ostype", "kern.osproductversion")
# vm_stat lines whose pages a new process can take (see the module's docstring)
AVAILABLE_PAGES = ("Pages free", "Pages inactive", "Pages speculative")
# vm_stat lines that count resident pages: their sum cannot exceed the Mac's memory
RESIDENT_PAGES = (
    "Pages free",
    "Pages active",
    "Pages inactive",
    "Pages speculative",
    "Pages throttled",
    "Pages wired down",
    "Pages occupied by compressor",
)
PAGE_SIZE = re.compile(r"page size of (\d+) bytes")


@dataclass(frozen=True, kw_only=True)
class MacInfo:
    """What a Mac says of itself that Linux has no place for."""

    macos_version: str | None  # kern.osproductversion; `sysctl hw machdep` dumps lack it
    performance_cores: int | None  # hw.perflevel0.physicalcpu
    efficiency_cores: int | None  # hw.perflevel1.physicalcpu
    page_size: int | None  # from vm_stat's header


def parse_sysctl(text: str) -> dict[str, str]:
    """`key: value` lines (`key = value` as BSD prints them too); the first of a key wins."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_][\w.]*)\s*(?::|=)\s?(.*)$", line.rstrip())
        if match:
            values.setdefault(match.group(1), match.group(2).strip())
    return values


def _flag(values: dict[str, str], key: str) -> bool:
    answer = values.get(key, "")
    return answer.isdigit() and int(answer) > 0


def _count(values: dict[str, str], key: str) -> int | None:
    answer = values.get(key, "")
    return int(answer) if answer.isdigit() and int(answer) > 0 else None


def mac_arch(values: dict[str, str]) -> str:
    """aarch64 for Apple Silicon, x86_64 for an Intel Mac, by keys only that CPU's kernel has."""
    if _flag(values, "hw.optional.arm64") or "hw.optional.neon" in values:
        return "aarch64"
    if "hw.optional.x86_64" in values or "machdep.cpu.vendor" in values:
        return "x86_64"
    return "unknown"


def mac_cpu(values: dict[str, str], *, where: str) -> CpuInfo:
    """The CPU of a Mac's sysctl values, in /proc/cpuinfo's terms."""
    arch = mac_arch(values)
    if arch == "unknown" or "hw.memsize" not in values:
        raise DataFileError(
            f"{where}: not a macOS sysctl dump: no hw.memsize, hw.optional.arm64 or "
            "hw.optional.x86_64 line (save one on the Mac with `sysctl -a > mac.sysctl`)"
        )
    tokens = {
        token for key, names in SYSCTL_TOKENS.items() if _flag(values, key) for token in names
    }
    return CpuInfo(
        arch=arch,
        model=values.get("machdep.cpu.brand_string", ""),
        tokens=frozenset(tokens),
        processors=_count(values, "hw.ncpu") or _count(values, "hw.logicalcpu") or 1,
        vendor="Apple" if arch == "aarch64" else values.get("machdep.cpu.vendor", ""),
    )


def parse_vm_stat(text: str, *, where: str) -> tuple[int, dict[str, int]]:
    """(page size, pages per line) of `vm_stat` output."""
    header = PAGE_SIZE.search(text.splitlines()[0] if text.strip() else "")
    if header is None:
        raise DataFileError(
            f"{where}: not vm_stat output: the first line must be 'Mach Virtual Memory "
            "Statistics: (page size of N bytes)' (save one on the Mac with `vm_stat > mac.vmstat`)"
        )
    pages = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        if value.strip().rstrip(".").isdigit():
            pages[key.strip().strip('"')] = int(value.strip().rstrip("."))
    missing = [name for name in AVAILABLE_PAGES if name not in pages]
    if missing:
        raise DataFileError(f"{where}: vm_stat output without the line(s) {', '.join(missing)}")
    return int(header.group(1)), pages


def mac_memory(
    values: dict[str, str], vm_stat: str, *, sysctl_where: str, vm_stat_where: str
) -> tuple[Memory, int]:
    """(memory, page size): total from hw.memsize, available from vm_stat; no cgroups on a Mac."""
    total = _count(values, "hw.memsize")
    if total is None:
        raise DataFileError(f"{sysctl_where}: no positive hw.memsize line")
    page_size, pages = parse_vm_stat(vm_stat, where=vm_stat_where)
    resident = page_size * sum(pages.get(name, 0) for name in RESIDENT_PAGES)
    if resident > total * 1.02:  # the kernel keeps a little memory out of every count
        raise DataFileError(
            f"{vm_stat_where}: counts {resident / 2**30:.1f} GiB of pages, more than the "
            f"{total / 2**30:.1f} GiB hw.memsize of {sysctl_where} says: not the same Mac",
            hint="save both on the same Mac: sysctl -a > mac.sysctl; vm_stat > mac.vmstat",
        )
    available = page_size * sum(pages[name] for name in AVAILABLE_PAGES)
    return Memory(total_bytes=total, available_bytes=available), page_size


def mac_info(values: dict[str, str], page_size: int | None) -> MacInfo:
    return MacInfo(
        macos_version=values.get("kern.osproductversion") or None,
        performance_cores=_count(values, "hw.perflevel0.physicalcpu"),
        efficiency_cores=_count(values, "hw.perflevel1.physicalcpu"),
        page_size=page_size,
    )


def live_sysctl() -> str:
    """This Mac's sysctl values (a key it lacks is skipped: the answer is read, not checked)."""
    return run.capture(["sysctl", *LIVE_KEYS], timeout=30, check=False).stdout


def live_vm_stat() -> str:
    return run.capture(["vm_stat"], timeout=30).stdout
