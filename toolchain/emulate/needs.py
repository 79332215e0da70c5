"""What CPU features a wheel's kernels need, read from the wheel file before anything is installed:
its build manifest when this toolkit made it, else its `+cpu.<target>` label's target, else the
-march its compiler recorded."""

from __future__ import annotations

import functools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from toolchain.emulate.models import emulation_data
from toolchain.targets import TargetCatalog, shipped_catalog
from toolchain.util.datafile import string_list, table
from toolchain.wheelfile import read_manifest

MARCH = re.compile(rb"-march=([A-Za-z0-9.+_-]+)")
KERNEL_LIBRARY = re.compile(r"^[^/]+/_[^/]*C[^/]*\.so$")


@dataclass(frozen=True, kw_only=True)
class WheelNeeds:
    features: tuple[str, ...]  # detect's `isa` names
    source: str  # how they were found, said in the report

    @property
    def known(self) -> bool:
        return bool(self.source) and not self.source.startswith("unknown")


@functools.cache
def march_table(arch: str) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    path, data = emulation_data()
    where = f"{path} [march.{arch}]"
    entry = table(table(data, "march", where=str(path)), arch, where=where)
    versions, extensions = (table(entry, key, where=where) for key in ("versions", "extensions"))
    return (
        {name: string_list(versions, name, where=f"{where}.versions") for name in versions},
        {name: string_list(extensions, name, where=f"{where}.extensions") for name in extensions},
    )


def march_features(march: str, arch: str = "aarch64") -> tuple[str, ...] | None:
    """Features `-march=armv8.2-a+bf16+...` makes the compiler use; None for an unknown base."""
    versions, extensions = march_table(arch)
    base, *extras = march.split("+")
    if base not in versions:
        return None
    found = list(versions[base])
    for extra in extras:
        if not extra.startswith("no"):
            found += [f for f in extensions.get(extra, ()) if f not in found]
    return tuple(found)


def marches_in(data: bytes) -> list[str]:
    return sorted({match.group(1).decode() for match in MARCH.finditer(data)})


def wheel_needs(wheel: Path, arch: str, catalog: TargetCatalog | None = None) -> WheelNeeds:
    manifest = read_manifest(wheel)
    if manifest is not None and manifest.get("min_isa") is not None:
        target = manifest.get("target_isa")
        return WheelNeeds(
            features=tuple(manifest["min_isa"]),
            source=f"its build manifest (target {target}: min_isa)",
        )
    return _needs_from_label(wheel, catalog or shipped_catalog()) or _needs_from_march(wheel, arch)


def _needs_from_label(wheel: Path, catalog: TargetCatalog) -> WheelNeeds | None:
    """A `+cpu.neon` wheel without its manifest (built but not repaired, or the manifest lost)
    needs what that target of its era needs; a release build's kernels record no -march."""
    _, version, _, tags = parse_wheel_filename(wheel.name)
    target = catalog.wheel_target(Version(str(version)), {tag.platform for tag in tags})
    if target is None:
        return None
    return WheelNeeds(
        features=target.min_isa,
        source=f"its label +cpu.{target.name} (target {target.name} of the {target.model} "
        "model: min_isa; no build manifest in the wheel)",
    )


def _needs_from_march(wheel: Path, arch: str) -> WheelNeeds:
    found: list[str] = []
    sources = []
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(n for n in archive.namelist() if KERNEL_LIBRARY.match(n)):
            for march in marches_in(archive.read(name)):
                features = march_features(march, arch)
                if features is None:
                    return WheelNeeds(
                        features=(), source=f"unknown: {name} was built with -march={march}"
                    )
                found += [f for f in features if f not in found]
                sources.append(f"-march={march} in {Path(name).name}")
    if not sources:
        return WheelNeeds(
            features=(),
            source="unknown: no build manifest, and its kernel libraries record no -march",
        )
    return WheelNeeds(
        features=tuple(found),
        source=f"the compiler's record (DWARF producer) of {', '.join(sources)}: compiled whole "
        "for that -march, without a tier for lesser CPUs",
    )
