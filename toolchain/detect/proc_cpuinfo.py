"""Reading /proc/cpuinfo text, from this machine or a saved dump of another."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CpuInfo:
    arch: str
    model: str
    tokens: frozenset[str]
    processors: int
    arm_implementer: str = ""
    arm_part: str = ""
    vendor: str = ""  # x86 vendor_id (GenuineIntel, AuthenticAMD)


def _blocks(text: str) -> list[dict[str, str]]:
    """One dict per processor block (a blank line ends a block)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current.setdefault(key.strip().lower(), value.strip())
    if current:
        blocks.append(current)
    return blocks


def _arch(fields: dict[str, str]) -> str:
    """Name the architecture of a dump from keys only that architecture's kernel writes."""
    if "flags" in fields and "vendor_id" in fields:
        return "x86_64" if "lm" in fields["flags"].split() else "i686"
    if "cpu implementer" in fields:
        return "aarch64" if fields.get("cpu architecture", "8") not in {"7", "6"} else "armv7l"
    if fields.get("cpu", "").upper().startswith("POWER"):
        return "ppc64le"
    if fields.get("isa", "").startswith("rv64"):
        return "riscv64"
    if "IBM/S390" in fields.get("vendor_id", ""):
        return "s390x"
    return "unknown"


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse a dump; features are the tokens every processor lists (hybrid or mixed hosts)."""
    blocks = _blocks(text)
    merged: dict[str, str] = {}
    for block in blocks:
        for key, value in block.items():
            merged.setdefault(key, value)
    token_sets = [
        frozenset((block.get("flags") or block.get("features") or "").split())
        for block in blocks
        if "flags" in block or "features" in block
    ]
    tokens = frozenset.intersection(*token_sets) if token_sets else frozenset()
    model = merged.get("model name") or merged.get("cpu") or merged.get("uarch") or ""
    processors = sum(1 for block in blocks if "processor" in block) or 1
    return CpuInfo(
        arch=_arch(merged),
        model=model,
        tokens=tokens,
        processors=processors,
        arm_implementer=merged.get("cpu implementer", ""),
        arm_part=merged.get("cpu part", ""),
        vendor=merged.get("vendor_id", ""),
    )
