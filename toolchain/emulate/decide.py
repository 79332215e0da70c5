"""Native, emulated or refused: decided from a wheel's platform tags, before installing anything."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from packaging.utils import parse_wheel_filename

from toolchain.emulate.models import RootSpec, root_spec
from toolchain.errors import UsageError

NATIVE, EMULATED, REFUSED = "native", "emulated", "refused"
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True, kw_only=True)
class PlatformTag:
    os: str  # "linux", "musllinux", "macosx", "win", "any"
    arch: str  # "aarch64", "x86_64", ... ("" for any)
    glibc: tuple[int, int] | None = None


@dataclass(frozen=True, kw_only=True)
class Decision:
    mode: str  # NATIVE, EMULATED or REFUSED
    wheel_arch: str
    reason: str
    root: RootSpec | None = None


def parse_platform(tag: str) -> PlatformTag:
    if tag == "any":
        return PlatformTag(os="any", arch="")
    if match := MANYLINUX.match(tag):
        glibc = (int(match.group(1)), int(match.group(2)))
        return PlatformTag(os="linux", arch=match.group(3), glibc=glibc)
    legacy, _, arch = tag.partition("_")
    if legacy in LEGACY:
        return PlatformTag(os="linux", arch=arch, glibc=LEGACY[legacy])
    if tag.startswith("linux_"):
        return PlatformTag(os="linux", arch=tag.removeprefix("linux_"))
    if tag.startswith("musllinux_"):
        return PlatformTag(os="musllinux", arch=tag.split("_", 3)[-1])
    if tag.startswith("macosx_"):
        return PlatformTag(os="macosx", arch=tag.split("_", 3)[-1])
    if tag.startswith("win"):
        return PlatformTag(os="win", arch=tag.partition("_")[2] or "x86")
    return PlatformTag(os="unknown", arch=tag)


def decide(
    wheel_name: str, host_arch: str, *, missing_tools: Callable[[RootSpec], list[str]]
) -> Decision:
    """How `verify` can run this wheel on a `host_arch` Linux machine.

    `missing_tools(spec)` names what emulating needs and this machine lacks (qemu, debootstrap).
    """
    try:
        tags = parse_wheel_filename(wheel_name)[3]
    except ValueError as exc:
        raise UsageError(f"{wheel_name}: not a wheel file name ({exc})") from exc
    platforms = sorted({parse_platform(tag.platform) for tag in tags}, key=repr)
    if any(p.os == "any" or (p.os == "linux" and p.arch == host_arch) for p in platforms):
        return Decision(mode=NATIVE, wheel_arch=host_arch, reason=f"a wheel for {host_arch}")
    linux = [p for p in platforms if p.os == "linux"]
    if not linux:
        names = ", ".join(sorted({f"{p.os} {p.arch}" for p in platforms}))
        return _refused(platforms, f"a wheel for {names}: verify runs manylinux/linux wheels only")
    arch = linux[0].arch
    try:
        spec = root_spec(arch)
    except UsageError:
        return _refused(linux, f"a wheel for {arch}, and no emulated root is known for {arch}")
    root_glibc = _glibc_of(spec)
    if all(p.glibc is not None and p.glibc > root_glibc for p in linux):
        wanted = min(p.glibc or (0, 0) for p in linux)
        return _refused(
            linux,
            f"a wheel for glibc {wanted[0]}.{wanted[1]}; the emulated Debian {spec.suite} root "
            f"has {root_glibc[0]}.{root_glibc[1]}",
        )
    missing = missing_tools(spec)
    if missing:
        return _refused(
            linux, f"a wheel for {arch}; emulating it needs {', '.join(missing)}", spec=spec
        )
    return Decision(
        mode=EMULATED,
        wheel_arch=arch,
        root=spec,
        reason=f"a wheel for {arch} on this {host_arch} machine: run under {spec.qemu}",
    )


def _refused(
    platforms: list[PlatformTag], reason: str, *, spec: RootSpec | None = None
) -> Decision:
    return Decision(mode=REFUSED, wheel_arch=platforms[0].arch, reason=reason, root=spec)


def _glibc_of(spec: RootSpec) -> tuple[int, int]:
    for platform in spec.wheel_platforms:
        tag = parse_platform(platform)
        if tag.glibc is not None:
            return tag.glibc
    return (0, 0)
