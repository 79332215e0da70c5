"""The microarchitecture in the words users know (zen4, sapphirerapids, neoverse_v2), by archspec.

archspec (Spack's library) names it from the vendor, the feature tokens and, on Arm, the CPU part.
It is given the tokens this toolkit decided (the probe's, where it ran), so a saved machine is named
as well as this one, and the name never disagrees with the ISA booleans. archspec's own host
detection is not used: it reads this machine's /proc/cpuinfo only.
"""

from __future__ import annotations

import re
from typing import Any

from toolchain.detect.proc_cpuinfo import CpuInfo
from toolchain.util.platform import SUPPORTED_ARCHES


def _name(core: str) -> str:
    """Our Arm core table's name in archspec's style: "Neoverse-V3" -> "neoverse_v3"."""
    return core.split(" (")[0].lower().replace("-", "_").replace(" ", "_")


def microarchitecture(cpu: CpuInfo, arm_core: str | None) -> str | None:
    """archspec's name for this CPU; our core table's name where archspec knows no such Arm core
    (Neoverse-V3/N3, Cortex-A76) or only a generic level fits; None for other architectures."""
    if cpu.arch not in SUPPORTED_ARCHES:
        return None
    from archspec.cpu import TARGETS, detect

    vendors: dict[str, str] = detect.TARGETS_JSON["conversions"]["arm_vendors"]
    vendor = (
        vendors.get(cpu.arm_implementer.lower(), "generic")
        if cpu.arch == "aarch64"
        else cpu.vendor or "generic"
    )
    info = detect.partial_uarch(vendor=vendor, features=set(cpu.tokens), cpu_part=cpu.arm_part)
    fits = detect.COMPATIBILITY_CHECKS[cpu.arch]
    candidates = [target for target in TARGETS.values() if fits(info, target)]

    def depth(target: Any) -> tuple[int, int]:
        return len(target.ancestors), len(target.features)

    # As archspec.cpu.host() chooses: the newest target past the best generic level; on Arm only
    # targets of the CPU's own part, and our table's name for a part archspec does not know (by
    # features alone a Neoverse-V3 would be called neoverse_v2).
    best_generic = max((c for c in candidates if c.vendor == "generic"), key=depth)
    if cpu.arch == "aarch64" and cpu.arm_part:
        if not any(t.cpu_part == cpu.arm_part for t in TARGETS.values()):
            return _name(arm_core) if arm_core else str(best_generic.name)
        candidates = [c for c in candidates if c.cpu_part == cpu.arm_part]
    specific = [c for c in candidates if c > best_generic]
    if specific:
        return str(max(specific, key=depth).name)
    return _name(arm_core) if arm_core else str(best_generic.name)


def apple_silicon(brand: str) -> tuple[str, str]:
    """(archspec's name, the generic Arm level under it) of an Apple Silicon chip, from its brand
    string ("Apple M4 Max" -> m4, armv8.6a), as archspec names a Mac's CPU: sysctl shows too few
    features to tell the chips apart, the brand tells them; a newer M counts down to a known one."""
    from archspec.cpu import TARGETS

    name, lowered = "aarch64", brand.lower()
    match = re.search(r"apple\s+m(\d+)", lowered)
    if match is not None:
        known = [f"m{n}" for n in range(int(match.group(1)), 0, -1) if f"m{n}" in TARGETS]
        name = known[0] if known else name
    elif lowered == "apple processor":  # macOS 11 on an M1 (archspec's darwin-bigsur-m1)
        name = "m1"
    target = TARGETS[name]
    generic = [t for t in (target, *target.ancestors) if t.vendor == "generic"]
    return name, str(max(generic, key=lambda t: len(t.ancestors)).name)
