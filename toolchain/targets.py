"""Build targets: the one owner of what a target is and of the wheel label that names it.

A target (`avx2`, `portable`, `bf16i8mm`) belongs to an ISA model: how one era of vLLM on one
architecture chooses its CPU kernels (recipes/isa-models.toml). A recipe names the model of each
architecture, so a target is always looked up with its architecture and era (`TargetCatalog`).
The plan takes switches, kernel tiers and oneDNN's ISA from here; publish, install-command and
verify the features a CPU needs. The label `+cpu.<target>` is formatted and read back only here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from toolchain.detect.isa import isa_table
from toolchain.errors import DataFileError
from toolchain.util.datafile import check_keys, load_toml, string, string_list, string_map, table
from toolchain.util.platform import SUPPORTED_ARCHES

ISA_MODELS_FILE = "isa-models.toml"
LABEL = "cpu"  # vLLM picks its CPU platform when its version contains 'cpu'
UNNAMED_VARIANT = "portable"  # the variant of a bare `+cpu` wheel, which names no target
# Every key isa-models.toml may have (a typo is an error, not ignored): extend here.
MODEL_KEYS = {"arch", "summary", "default_target", "targets"}
TARGET_KEYS = {"env", "min_isa", "host_must_lack", "host_must_have", "kernel_tiers",
               "onednn_isa", "march"}  # fmt: skip
# ONEDNN_ENABLE_PRIMITIVE_CPU_ISA's values, lowest first (oneDNN's cmake/options.cmake); its GEMM
# kernels (ONEDNN_ENABLE_GEMM_KERNELS_ISA) know no AMX.
ONEDNN_ISAS = ("SSE41", "AVX2", "AVX512", "AMX", "ALL")
ONEDNN_GEMM_ISAS = ("SSE41", "AVX2", "AVX512")


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    arch: str
    model: str  # the ISA model (era) it belongs to
    env: Mapping[str, str]
    min_isa: tuple[str, ...]
    host_must_lack: tuple[str, ...] = ()
    host_must_have: tuple[str, ...] = ()
    kernel_tiers: tuple[str, ...] = ()  # empty: the era's one `_C`, not chosen by the toolkit
    onednn_isa: str | None = None  # None: oneDNN's own default (every ISA)
    march: str | None = None  # the -march upstream's cmake compiles with, where data says it

    def wheel_version(self, vllm: Version | str) -> str:
        """The built wheel's version: the release with this target's label (`0.32.0+cpu.avx2`)."""
        return f"{vllm}+{LABEL}.{self.name}"


@dataclass(frozen=True, kw_only=True)
class Label:
    """What a wheel's `+cpu[.<target>[.<rebuild>]]` label says."""

    target: str | None  # None: a bare `+cpu`, which names no target

    @property
    def variant(self) -> str:
        return self.target or UNNAMED_VARIANT


def read_label(version: Version) -> Label | None:
    """The label of a wheel's version; None when it has no `+cpu` label."""
    local = (version.local or "").split(".")
    if local[0] != LABEL:
        return None
    return Label(target=local[1] if len(local) > 1 else None)


@dataclass(frozen=True, kw_only=True)
class IsaModel:
    name: str
    arch: str
    summary: str
    targets: Mapping[str, Target]
    default_target: str | None = None  # None: the richest target the host builds and runs


def default_recipes_dir() -> Path:
    """Recipes installed with the package, or the repository's recipes/ beside a source tree."""
    installed = Path(str(resources.files("toolchain") / "recipes"))
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "recipes"


def model_named(models: Mapping[str, IsaModel], name: str, arch: str, *, where: str) -> IsaModel:
    """The model a recipe names for `arch`: it must exist and be one of that architecture."""
    if name not in models or models[name].arch != arch:
        raise DataFileError(f"{where} names no {arch} model of {ISA_MODELS_FILE} ('{name}')")
    return models[name]


@functools.cache
def load_isa_models(path: Path) -> Mapping[str, IsaModel]:
    data, where = load_toml(path), str(path)
    models = {}
    for name in data:
        at = f"{where} [{name}]"
        model = table(data, name, where=where)
        check_keys(model, MODEL_KEYS, where=at)
        arch = string(model, "arch", where=at)
        if arch not in SUPPORTED_ARCHES:
            raise DataFileError(f"{at}: key 'arch' is one of {', '.join(SUPPORTED_ARCHES)}")
        targets_data = table(model, "targets", where=at)
        targets = {
            target: _target(table(targets_data, target, where=f"{at} targets"), target, arch,
                             name, where=f"{where} [{name}.targets.{target}]")
            for target in targets_data
        }  # fmt: skip
        default = string(model, "default_target", where=at) if "default_target" in model else None
        if default is not None and default not in targets:
            raise DataFileError(f"{at}: default_target {default!r} is not a target")
        summary = string(model, "summary", where=at)
        models[name] = IsaModel(
            name=name, arch=arch, summary=summary, targets=targets, default_target=default
        )
    return models


def _target(data: dict[str, Any], name: str, arch: str, model: str, *, where: str) -> Target:
    check_keys(data, TARGET_KEYS, where=where)
    lists = {key: string_list(data, key, where=where) for key in ("min_isa", "host_must_lack",
                                                                  "host_must_have")}  # fmt: skip
    _known(lists, set(isa_table().features[arch]), f"{arch} feature names (data/isa.toml)", where)
    tiers = string_list(data, "kernel_tiers", where=where)
    # `_C` is every era's library; where the tiers table lists no needs for it, the wheel's own
    _known({"kernel_tiers": tiers}, {"_C", *tier_needs(arch)}, f"{arch} kernel tiers", where)
    onednn_isa = string(data, "onednn_isa", where=where) if "onednn_isa" in data else None
    if onednn_isa is not None and onednn_isa not in ONEDNN_ISAS:
        raise DataFileError(f"{where}: onednn_isa is one of {', '.join(ONEDNN_ISAS)}")
    march = string(data, "march", where=where) if "march" in data else None
    env = string_map(data, "env", where=where)
    return Target(name=name, arch=arch, model=model, env=env, kernel_tiers=tiers,
                  onednn_isa=onednn_isa, march=march, **lists)  # fmt: skip


def _known(lists: Mapping[str, tuple[str, ...]], known: set[str], what: str, where: str) -> None:
    """Refuse a value the data does not know (a tier `_C_AVX3`, a feature `avx3`)."""
    for key, values in lists.items():
        unknown = sorted(set(values) - known)
        if unknown:
            raise DataFileError(
                f"{where}: key '{key}': unknown values {unknown}; known {what}: {sorted(known)}"
            )


# The kernel libraries a wheel ships and what each was compiled for (data/kernel-tiers.toml).
def _tiers_file() -> tuple[Path, dict[str, Any]]:
    path = Path(str(resources.files("toolchain") / "data" / "kernel-tiers.toml"))
    return path, load_toml(path)


@functools.cache
def tier_needs(arch: str) -> Mapping[str, tuple[str, ...]]:
    path, data = _tiers_file()
    needs = table(data, "needs", where=str(path))
    if arch not in needs:
        return {}
    tiers = table(needs, arch, where=f"{path} [needs]")
    return {name: string_list(tiers, name, where=f"{path} [needs.{arch}]") for name in tiers}


@functools.cache
def tier_picks(arch: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(tier, features it needs to be picked), in the order vLLM tries them."""
    path, data = _tiers_file()
    where = f"{path} [[pick.{arch}]]"
    entries = table(data, "pick", where=str(path)).get(arch, [])
    return tuple(
        (string(entry, "tier", where=where), string_list(entry, "when", where=where))
        for entry in entries
    )


def picked_tier(arch: str, isa: Mapping[str, bool], shipped: Iterable[str]) -> str | None:
    """The kernel library vLLM loads on a CPU with `isa`, among the tiers a wheel ships."""
    shipped = list(shipped)
    for tier, when in tier_picks(arch):
        if tier in shipped and all(isa.get(feature) for feature in when):
            return tier
    return shipped[0] if len(shipped) == 1 else None


@dataclass(frozen=True, kw_only=True)
class TargetCatalog:
    """Every era the recipes know: (release, {platform: model}), oldest first. A platform is an
    architecture, or `macos-aarch64` for a recipe's [darwin] build."""

    eras: tuple[tuple[Version, Mapping[str, IsaModel]], ...]

    def models(self, platform: str, version: Version) -> list[IsaModel]:
        """The platform's models, nearest era first: the newest recipe at or below `version`
        (its era), then older ones, then the newer ones from the oldest."""
        public = Version(version.public)
        below = [models for release, models in self.eras if release <= public][::-1]
        above = [models for release, models in self.eras if release > public]
        return [models[platform] for models in below + above if platform in models]

    def target(self, platform: str, version: Version, label: Label) -> Target | None:
        """The target a wheel's label names, looked up in its era first (a 0.16 `avx2` is not
        0.17's); a bare `+cpu` is its era's default target where it has one (x86 portable,
        0.32's Arm portable), else unknown (None), as is a name no era of the platform has."""
        found = self._found(platform, version, label)
        return found[1] if found else None

    def _found(self, platform: str, version: Version, label: Label) -> tuple[int, Target] | None:
        """The target and how far from the wheel's era it was found (0: in its own era)."""
        models = self.models(platform, version)
        if label.target is None:
            default = models[0].targets.get(models[0].default_target or "") if models else None
            return (0, default) if default else None
        return next(
            ((rank, m.targets[label.target]) for rank, m in enumerate(models)
             if label.target in m.targets),
            None,
        )  # fmt: skip

    def wheel_target(self, version: Version, platform_tags: Iterable[str]) -> Target | None:
        """The target of a wheel by its version and platform tags; a wheel for any platform
        (py3-none-any) takes the platform whose model has the labelled target nearest the
        wheel's era (a 1.0 `portable` is x86's, whose every era since 0.17 has one, not 0.32's
        Arm one), and no platform when two are as near."""
        label = read_label(version)
        if label is None:
            return None
        platform = wheel_platform(platform_tags)
        if platform is not None:
            return self.target(platform, version, label)
        found = [self._found(arch, version, label) for arch in SUPPORTED_ARCHES]
        named = sorted((hit for hit in found if hit is not None), key=lambda hit: hit[0])
        if not named or (len(named) > 1 and named[0][0] == named[1][0]):
            return None
        return named[0][1]


def wheel_platform(platform_tags: Iterable[str]) -> str | None:
    """The catalog's platform of a wheel's platform tags (`manylinux_2_34_x86_64` is x86_64,
    `macosx_14_0_arm64` macos-aarch64); None for `any` or an architecture not built here."""
    for tag in platform_tags:
        if tag.startswith("macosx_") and tag.endswith("_arm64"):
            return "macos-aarch64"
        arch = next((arch for arch in SUPPORTED_ARCHES if tag.endswith(f"_{arch}")), None)
        if arch is not None:
            return arch
    return None


def shipped_catalog() -> TargetCatalog:
    return load_catalog(default_recipes_dir())


@functools.cache
def load_catalog(recipes_dir: Path) -> TargetCatalog:
    """The eras of the recipes in `recipes_dir` (each recipe's `vllm`, [isa_model], [darwin])."""
    models = load_isa_models(recipes_dir / ISA_MODELS_FILE)
    eras = []
    for path in sorted(recipes_dir.glob("vllm-*.toml")):
        data, where = load_toml(path), str(path)
        try:
            release = Version(string(data, "vllm", where=where))
        except InvalidVersion as exc:
            raise DataFileError(f"{where}: key 'vllm' is not a version") from exc
        named = table(data, "isa_model", where=where)
        by_platform = {
            arch: model_named(models, string(named, arch, where=where), arch,
                              where=f"{where} [isa_model]: key '{arch}'")
            for arch in SUPPORTED_ARCHES if arch in named
        }  # fmt: skip
        darwin = data.get("darwin")
        if isinstance(darwin, dict) and "isa_model" in darwin:
            name = string(darwin, "isa_model", where=f"{where} [darwin]")
            by_platform["macos-aarch64"] = model_named(
                models, name, "aarch64", where=f"{where} [darwin]: key 'isa_model'"
            )
        eras.append((release, by_platform))
    return TargetCatalog(eras=tuple(sorted(eras, key=lambda era: era[0])))
