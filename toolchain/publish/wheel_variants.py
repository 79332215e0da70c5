"""Variant wheels for installers that tell CPUs apart: uv 0.13 `--preview-features wheel-variants`.

The format is PEP 825 (package format) with PEP 850's providers, both DRAFTS that may still change:
the variant label after the platform tag (`...-manylinux_2_34_x86_64-x86_64_v3.whl`), the
properties in `*.dist-info/variant.json`, and beside the wheels `{name}-{version}-variants.json`.
The one provider used is the x86-64 microarchitecture level (`x86_64 :: level :: v3`), which uv
evaluates itself ("x86-64-variant-provider" is built in): checked by hand here, uv 0.13.9 picks
`x86_64_v3` on an x86-64-v3 host and `x86_64_v4` above it, and the non-variant wheel below.

Only a build whose minimum ISA is exactly a level can be a variant: `avx2` (v3) and `avx512` (v4).
A build that needs more (AVX-512 BF16, VNNI, AMX) stays in the per-ISA indexes only: the level
provider cannot tell a CPU that has those apart, and a wrong pick dies by SIGILL. The one-wheel
`portable` build is the natural non-variant fallback; with only per-ISA builds, the lowest one is.
All wheels of one release get one version, `X+cpu` (vLLM needs `cpu` in it).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.version import Version

from toolchain.util.datafile import parse_json
from toolchain.wheelfile import retag_wheel

SCHEMA = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
NAMESPACE = "x86_64"
PROVIDERS = {NAMESPACE: {"requires": ["x86-64-variant-provider"]}}
FOLDER = "wheel-variants"  # ROOT/wheel-variants/simple/: not a target name (those have no '-')
V3 = frozenset({"avx2", "fma", "f16c"})
LEVELS = {"v3": V3, "v4": V3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}
LABEL_PREFIX = "x86_64_"  # the label of level v3 is x86_64_v3
FALLBACK_TARGET = "portable"


def level_of(min_isa: Sequence[str]) -> str | None:
    """The lowest x86-64 level every CPU of which runs a build needing `min_isa`, if one does."""
    return next((level for level, has in LEVELS.items() if set(min_isa) <= has), None)


def host_level(host_isa: Mapping[str, bool]) -> str | None:
    """The highest x86-64 level a CPU with these features has."""
    fits = [level for level, needs in LEVELS.items() if all(host_isa.get(f) for f in needs)]
    return fits[-1] if fits else None


def level_of_label(label: str | None) -> str | None:
    """The level a variant label stands for (x86_64_v3 -> v3), None for anything else."""
    level = (label or "").removeprefix(LABEL_PREFIX)
    return level if label and label.startswith(LABEL_PREFIX) and level in LEVELS else None


class Build(Protocol):
    """A published wheel as this module needs it (the index's IndexedWheel is one)."""

    @property
    def path(self) -> Path: ...
    @property
    def project(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def variant(self) -> str: ...  # the build target: avx2, portable, ...
    @property
    def min_isa(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, kw_only=True)
class Release:
    """The variant files of one project release, written into a folder."""

    project: str
    version: str
    wheels: tuple[tuple[Path, str | None], ...]  # (file, its level; None: the fallback)
    metadata_file: Path  # {name}-{version}-variants.json
    notes: tuple[str, ...]


def _metadata(levels: Sequence[str]) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": [NAMESPACE]},
        "providers": PROVIDERS,
        "variants": {LABEL_PREFIX + level: {NAMESPACE: {"level": [level]}} for level in levels},
    }


def _name(build: Build, version: str, level: str | None) -> str:
    """The build's file name with `version`, and the variant label after the platform tag."""
    parts = build.path.name.removesuffix(".whl").split("-")
    parts[1] = version
    return "-".join([*parts, *([LABEL_PREFIX + level] if level else [])]) + ".whl"


def release_variants(builds: Sequence[Build], folder: Path) -> Release | None:
    """The variant wheels of one release (same project and public version), or None when there
    is nothing to choose between (no build maps to a level)."""
    first = builds[0]
    version = f"{Version(first.version).public}+cpu"
    levels = {b.path: level_of(b.min_isa) for b in builds if b.variant != FALLBACK_TARGET}
    chosen = {path: level for path, level in levels.items() if level}
    notes = [
        f"{b.path.name}: needs {' '.join(b.min_isa)}, more than an x86-64 level: per-ISA index only"
        for b in builds
        if b.path in levels and not levels[b.path]
    ]
    if not chosen:
        return None
    wheels: list[tuple[Path, str | None]] = []
    for build in builds:
        level = chosen.get(build.path)
        if level is not None:
            variant_json = json.dumps(_metadata([level]), indent=2, sort_keys=True).encode()
            dest = folder / _name(build, version, level)
            retag_wheel(build.path, dest, version=version, add={"variant.json": variant_json})
            wheels.append((dest, level))
    # the non-variant fallback for each Python/platform tag: the portable build, else the lowest
    by_tags: dict[str, list[Build]] = {}
    for build in builds:
        if build.variant == FALLBACK_TARGET or build.path in chosen:
            by_tags.setdefault(build.path.name.split("-", 2)[2], []).append(build)
    for _, group in sorted(by_tags.items()):
        fallback = min(group, key=lambda b: (b.variant != FALLBACK_TARGET, len(b.min_isa)))
        dest = folder / _name(fallback, version, None)
        retag_wheel(fallback.path, dest, version=version)
        wheels.append((dest, None))
    metadata_file = folder / f"{first.project.replace('-', '_')}-{version}-variants.json"
    metadata_file.write_text(
        json.dumps(_metadata(sorted(set(chosen.values()))), indent=2, sort_keys=True) + "\n"
    )
    return Release(
        project=first.project,
        version=version,
        wheels=tuple(wheels),
        metadata_file=metadata_file,
        notes=tuple(notes),
    )


def read_variant_json(wheel: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        raw = archive.read(names[0]) if names else None
    return parse_json(raw, where=f"{wheel}: {names[0]}") if raw is not None else None
