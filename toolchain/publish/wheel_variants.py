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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from toolchain.wheelfile import retag_wheel

SCHEMA = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
NAMESPACE = "x86_64"
PROVIDERS = {NAMESPACE: {"requires": ["x86-64-variant-provider"]}}
FOLDER = "wheel-variants"  # ROOT/wheel-variants/simple/: not a target name (those have no '-')
V3 = frozenset({"avx2", "fma", "f16c"})
LEVELS = {"v3": V3, "v4": V3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}
FALLBACK_TARGET = "portable"


def level_of(min_isa: Sequence[str]) -> str | None:
    """The lowest x86-64 level every CPU of which runs a build needing `min_isa`, if one does."""
    return next((level for level, has in LEVELS.items() if set(min_isa) <= has), None)


@dataclass(frozen=True, kw_only=True)
class Source:
    path: Path
    project: str
    version: str
    target: str
    min_isa: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Release:
    """The variant files of one project release, written into a folder."""

    project: str
    version: str
    files: tuple[Path, ...]  # the variant wheels, the non-variant fallback, the variants.json
    notes: tuple[str, ...]


def _metadata(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": [NAMESPACE]},
        "providers": PROVIDERS,
        "variants": {label: {NAMESPACE: {"level": [level]}} for label, level in labels.items()},
    }


def _name(source: Source, version: str, label: str | None) -> str:
    """The source's file name with `version`, and the variant label after the platform tag."""
    parts = source.path.name.removesuffix(".whl").split("-")
    parts[1] = version
    return "-".join([*parts, *([label] if label else [])]) + ".whl"


def release_variants(sources: Sequence[Source], folder: Path) -> Release | None:
    """The variant wheels of one release (same project and public version), or None when there
    is nothing to choose between (no build maps to a level)."""
    first = sources[0]
    version = f"{Version(first.version).public}+cpu"
    levels = {s.path: level_of(s.min_isa) for s in sources if s.target != FALLBACK_TARGET}
    chosen = {path: level for path, level in levels.items() if level}
    notes = [
        f"{s.path.name}: needs {' '.join(s.min_isa)}, more than an x86-64 level: per-ISA index only"
        for s in sources
        if s.path in levels and not levels[s.path]
    ]
    if not chosen:
        return None
    labels = {f"x86_64_{level}": level for level in chosen.values()}
    files = []
    for source in sources:
        level = chosen.get(source.path)
        if level is None:
            continue
        label = f"x86_64_{level}"
        variant_json = json.dumps(_metadata({label: level}), indent=2, sort_keys=True)
        files.append(
            retag_wheel(
                source.path,
                folder / _name(source, version, label),
                version=version,
                add={"variant.json": variant_json.encode()},
            )
        )
    # the non-variant fallback for each Python/platform tag: the portable build, else the lowest
    by_tags: dict[str, list[Source]] = {}
    for source in sources:
        if source.target == FALLBACK_TARGET or source.path in chosen:
            by_tags.setdefault(source.path.name.split("-", 2)[2], []).append(source)
    fallbacks = [
        min(group, key=lambda s: (s.target != FALLBACK_TARGET, len(s.min_isa)))
        for _, group in sorted(by_tags.items())
    ]
    for source in fallbacks:
        files.append(
            retag_wheel(source.path, folder / _name(source, version, None), version=version)
        )
    index_json = folder / f"{first.project.replace('-', '_')}-{version}-variants.json"
    index_json.write_text(json.dumps(_metadata(labels), indent=2, sort_keys=True) + "\n")
    files.append(index_json)
    return Release(project=first.project, version=version, files=tuple(files), notes=tuple(notes))


def read_variant_json(wheel: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        return json.loads(archive.read(names[0])) if names else None
