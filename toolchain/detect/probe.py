"""Running the native CPU probe and weighing it against what /proc/cpuinfo claims."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from toolchain.errors import ToolchainError
from toolchain.util import run

PROBE_IN_WHEEL = "toolchain/_native/cpuprobe"
AMX_TOKENS = frozenset({"amx_bf16", "amx_int8", "amx_tile"})


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    arch: str
    known: frozenset[str]
    cpuid_flags: frozenset[str]
    flags: frozenset[str]
    xcr0: int | None = None
    avx10_version: int = 0
    amx_permitted: bool | None = None
    hwcap: int | None = None
    hwcap2: int | None = None


@dataclass(frozen=True, kw_only=True)
class Reconciled:
    tokens: frozenset[str]
    notes: tuple[str, ...]


def probe_path() -> Path:
    """The compiled probe: in this package, or in the installed copy if a source tree shadows it."""
    here = Path(str(resources.files("toolchain") / "_native" / "cpuprobe"))
    if here.is_file():
        return here
    try:
        installed = metadata.distribution("vllm-cpu-builder").locate_file(PROBE_IN_WHEEL)
    except metadata.PackageNotFoundError:
        return here
    return Path(str(installed)) if Path(str(installed)).is_file() else here


def parse_probe_output(text: str) -> ProbeResult:
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value.strip()
    flags = frozenset(fields.get("flags", "").split())
    cpuid_flags = frozenset(fields.get("cpuid_flags", "").split()) or flags
    # The permission only means something on a CPU with AMX tiles.
    amx = fields.get("amx_permitted") if "amx_tile" in cpuid_flags else None
    return ProbeResult(
        arch=fields.get("arch", "unknown"),
        known=frozenset(fields.get("known", "").split()),
        cpuid_flags=cpuid_flags,
        flags=flags,
        xcr0=int(fields["xcr0"], 16) if "xcr0" in fields else None,
        avx10_version=int(fields.get("avx10_version", "0")),
        amx_permitted=None if amx is None else amx == "1",
        hwcap=int(fields["hwcap"], 16) if "hwcap" in fields else None,
        hwcap2=int(fields["hwcap2"], 16) if "hwcap2" in fields else None,
    )


def run_probe() -> tuple[ProbeResult | None, str]:
    """The probe's answer, or None and the reason it could not give one."""
    path = probe_path()
    if not path.is_file():
        return None, f"the CPU probe is not compiled into this install ({path} is missing)"
    try:
        output = run.capture([path], timeout=30)
    except ToolchainError as exc:
        return None, f"the CPU probe failed: {exc.message}"
    return parse_probe_output(output.stdout), ""


def reconcile(probe: ProbeResult, cpuinfo_tokens: frozenset[str]) -> Reconciled:
    """Let the probe decide every feature it checks; keep the kernel's word for the rest."""
    usable = probe.flags
    notes: list[str] = []
    if probe.amx_permitted is False and usable & AMX_TOKENS:
        usable = usable - AMX_TOKENS
        notes.append(
            "CPUID and XCR0 allow AMX, but the kernel refused this process AMX tile data "
            "(arch_prctl ARCH_REQ_XCOMP_PERM); AMX counts as unusable"
        )
    xcr0 = f"XCR0=0x{probe.xcr0:x}" if probe.xcr0 is not None else "the OS"
    for token in sorted(probe.known):
        listed, runs = token in cpuinfo_tokens, token in usable
        if listed and not runs:
            why = (
                f"{xcr0} has its register state off"
                if token in probe.cpuid_flags
                else "CPUID does not advertise it"
            )
            notes.append(f"/proc/cpuinfo lists {token} but {why}; trusting the probe: unusable")
        elif runs and not listed:
            notes.append(
                f"the probe finds {token} usable but /proc/cpuinfo does not list it "
                "(an older kernel?); trusting the probe: usable"
            )
    return Reconciled(tokens=(cpuinfo_tokens - probe.known) | usable, notes=tuple(notes))
