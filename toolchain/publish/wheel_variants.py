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
`portable` build is the non-variant fallback, and only it: it picks its kernels at import on any
CPU vLLM runs on, while a lean avx2 build offered as the fallback would reach CPUs below
x86-64-v3 with code built for AVX2 machines only. A Python with no portable build has no fallback
(uv then installs nothing there), and a note says so.
All wheels of one release get one version, `X+cpu` (vLLM needs `cpu` in it); they live in their own
folder, `ROOT/wheel-variants/files/`, so a copy never replaces a wheel of the per-ISA indexes (an
upstream `X+cpu` wheel has the very name of a fallback copy). Two builds that would give one file
(a rebuild `+cpu.avx2.1` beside `+cpu.avx2`) give the newest, said in a note, as pip takes the
newest from the per-ISA index; two of one version are refused.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.version import Version

from toolchain.errors import PublishError
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
    """The variant wheels of one release (same project and public version), written into
    `folder` (never over a file there), or None when no build maps to a level."""
    first = builds[0]
    version = f"{Version(first.version).public}+cpu"
    levels = {b.path: level_of(b.min_isa) for b in builds if b.variant != FALLBACK_TARGET}
    notes = [
        f"{b.path.name}: needs {' '.join(b.min_isa)}, more than an x86-64 level: per-ISA index only"
        for b in builds
        if b.path in levels and not levels[b.path]
    ]
    leveled = [b for b in builds if levels.get(b.path)]
    if not leveled:
        return None
    # one file per name: the variant of each (Python/platform tags, level), the fallback of each
    # tags from the portable build only (it runs below x86-64-v3; an avx2 build would not)
    named: dict[str, list[tuple[Build, str | None]]] = {}
    for build in leveled:
        named.setdefault(_name(build, version, levels[build.path]), []).append(
            (build, levels[build.path])
        )
    for build in builds:
        if build.variant == FALLBACK_TARGET:
            named.setdefault(_name(build, version, None), []).append((build, None))
    wheels: list[tuple[Path, str | None]] = []
    for name, candidates in sorted(named.items()):
        build, level = _newest(name, candidates, notes)
        wheels.append((_write(build, folder / name, version, level), level))
    notes += _missing_fallbacks(leveled, {n for n, c in named.items() if c[0][1] is None}, version)
    metadata_file = folder / f"{first.project.replace('-', '_')}-{version}-variants.json"
    _refuse_existing(metadata_file)
    chosen = sorted({level for _, level in wheels if level})
    metadata_file.write_text(json.dumps(_metadata(chosen), indent=2, sort_keys=True) + "\n")
    return Release(
        project=first.project,
        version=version,
        wheels=tuple(wheels),
        metadata_file=metadata_file,
        notes=tuple(notes),
    )


def _newest(
    name: str, candidates: Sequence[tuple[Build, str | None]], notes: list[str]
) -> tuple[Build, str | None]:
    """The one build that becomes `name`: the newest version (as pip takes from the per-ISA
    index), said in `notes`; two of the newest version are refused."""
    ordered = sorted(candidates, key=lambda c: Version(c[0].version), reverse=True)
    newest, level = ordered[0]
    what = f"x86-64 level {level}" if level else "the non-variant fallback"
    if len(ordered) > 1 and Version(ordered[1][0].version) == Version(newest.version):
        raise PublishError(
            f"{newest.path.name} and {ordered[1][0].path.name} both map to {what} as {name}, "
            "with one version: which to serve cannot be told; nothing was published",
            hint="publish one of them (move the other out of --wheel-dir), or bump its version",
        )
    if len(ordered) > 1:
        older = ", ".join(c[0].path.name for c in ordered[1:])
        notes.append(f"{name}: the newest build of {what}, {newest.path.name}; not {older}")
    return newest, level


def _missing_fallbacks(leveled: Sequence[Build], fallbacks: set[str], version: str) -> list[str]:
    """A note for each Python/platform tags that has variants but no portable build."""
    missing = {
        b.path.name.split("-", 2)[2].removesuffix(".whl")
        for b in leveled
        if _name(b, version, None) not in fallbacks
    }
    return [
        f"{tags}: no portable build, so no non-variant fallback: uv installs nothing on a CPU "
        "below x86-64-v3 (a lean avx2 build is never the fallback)"
        for tags in sorted(missing)
    ]


def _write(build: Build, dest: Path, version: str, level: str | None) -> Path:
    """`build` retagged as `version` at `dest`, with its variant.json when it has a level."""
    _refuse_existing(dest)
    variant_json = json.dumps(_metadata([level]), indent=2, sort_keys=True) if level else None
    add = {"variant.json": variant_json.encode()} if variant_json else None
    retag_wheel(build.path, dest, version=version, add=add)
    return dest


def _refuse_existing(dest: Path) -> None:
    if dest.exists():  # a variant copy never replaces another file
        raise PublishError(
            f"{dest.name} would overwrite a file of the index; nothing was published"
        )


def read_variant_json(wheel: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/variant.json")]
        raw = archive.read(names[0]) if names else None
    return parse_json(raw, where=f"{wheel}: {names[0]}") if raw is not None else None
