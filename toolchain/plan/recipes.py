"""Recipes: one TOML file per vLLM version, loaded into frozen dataclasses and validated."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from toolchain.errors import DataFileError, UsageError
from toolchain.runtime_deps import PYTORCH_CPU_INDEX
from toolchain.targets import ISA_MODELS_FILE, IsaModel, load_isa_models, model_named
from toolchain.util.datafile import (
    check_keys,
    load_toml,
    sha256_hex,
    string,
    string_list,
    string_map,
    table,
)
from toolchain.util.platform import SUPPORTED_ARCHES
from toolchain.util.units import MIB


@dataclass(frozen=True, kw_only=True)
class TiersSwitch:
    """The switch an architecture's tiers patch adds to vLLM: which kernel tiers to compile."""

    name: str
    patch: str
    # an unpatched build compiles every tier of its era (x86's dispatch wheel); else it compiles
    # one _C whose ISA other switches choose (Arm), so every target with tiers needs the switch
    unpatched_builds_all: bool


TIERS_SWITCHES = {
    "x86_64": TiersSwitch(
        name="VLLM_CPU_X86_TIERS", patch="vllm-cpu-x86-tiers.patch", unpatched_builds_all=True
    ),
    "aarch64": TiersSwitch(
        name="VLLM_CPU_ARM_TIERS", patch="vllm-0.32-cpu-arm-tiers.patch", unpatched_builds_all=False
    ),
}


@dataclass(frozen=True, kw_only=True)
class ThirdParty:
    name: str
    arch: str | None
    repository: str
    ref: str
    archive: str
    env: str
    commit: str | None = None
    tar_sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class DroppedRequirement:
    name: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Patch:
    file: Path
    sha256: str
    versions: SpecifierSet
    reason: str
    arch: str | None = None  # None: every architecture
    enables: tuple[str, ...] = ()  # build switches the patch adds to vLLM
    content: bytes = field(default=b"", repr=False, compare=False)  # as read once, and hashed

    def applies_to(self, arch: str) -> bool:
        return self.arch is None or self.arch == arch


@dataclass(frozen=True, kw_only=True)
class OnednnPrune:
    """The oneDNN units a target's kernel library never links, left out of its compile."""

    target: str
    file: Path
    sha256: str
    units: int
    reason: str
    arch: str  # the recipe's `arch`, or the one architecture whose ISA model has the target
    # `sha256:HEX` of the oneDNN callers of the release it was learned from (plan/onednn_callers);
    # None: not recorded, so new-recipe hands it on to no other release
    callers: str | None = None
    # aarch64: whether oneDNN was built with the Arm Compute Library when the list was learned
    # (its acl_* units call others); None: not recorded
    acl: bool | None = None
    content: bytes = field(default=b"", repr=False, compare=False)  # as read once, and hashed

    def applies_to(self, target: str, arch: str) -> bool:
        return self.target == target and self.arch == arch

    def record(self) -> dict[str, str | int]:
        """What the plan's JSON and the manifest say of it."""
        return {"file": self.file.name, "sha256": self.sha256, "units": self.units}


@dataclass(frozen=True, kw_only=True)
class CompileMemory:
    """The measured peak of the heaviest unit of some CMake targets ([[compile_memory]])."""

    what: str
    targets: tuple[str, ...]  # CMake target names; '*' matches any characters
    peak_bytes: int
    pool: str  # "light": many at a time, before the others; "heavy": as the flat figure allows
    arch: str | None = None  # measured for this architecture's build only; None: every one

    def applies_to(self, arch: str) -> bool:
        return self.arch is None or self.arch == arch


@dataclass(frozen=True, kw_only=True)
class DarwinRecipe:
    """macOS on Apple Silicon ([darwin]): torch's pin there, the macOS and Apple clang floors, and
    the ISA model of the release's macOS build."""

    torch: str
    macos_min: str
    clang_min: str
    isa_model: IsaModel


@dataclass(frozen=True, kw_only=True)
class Recipe:
    path: Path
    vllm: Version
    sdist: str
    sha256: str
    git_tag: str | None
    python_requires: SpecifierSet
    python_preferred: str
    torch: Mapping[str, str]
    torch_index: str
    build_requires: tuple[str, ...]
    memory_per_job_bytes: int
    gxx_min: Mapping[str, str]
    cmake_min: str
    isa_models: Mapping[str, IsaModel]
    third_party: tuple[ThirdParty, ...]
    drop_requirements: tuple[DroppedRequirement, ...] = ()
    patches: tuple[Patch, ...] = ()
    onednn_prune: tuple[OnednnPrune, ...] = ()
    compile_memory: tuple[CompileMemory, ...] = ()  # empty: every unit weighs the flat figure
    darwin: DarwinRecipe | None = None  # None: no macOS build known for this release
    inherited_from: Version | None = None  # whose measured figures these are; None: this release's

    def third_party_for(self, arch: str) -> tuple[ThirdParty, ...]:
        return tuple(dep for dep in self.third_party if dep.arch in (None, arch))


def recipe_path(recipes_dir: Path, version: str) -> Path:
    return recipes_dir / f"vllm-{version}.toml"


def known_versions(recipes_dir: Path) -> list[str]:
    names = [path.stem.removeprefix("vllm-") for path in recipes_dir.glob("vllm-*.toml")]
    for name in names:
        _version(name, where=f"{recipe_path(recipes_dir, name)}: its name")
    return sorted(names, key=Version)


def load_recipe(recipes_dir: Path, version: str) -> Recipe:
    path = recipe_path(recipes_dir, version)
    if not path.is_file():
        known = ", ".join(known_versions(recipes_dir)) or "none"
        raise UsageError(
            f"no recipe for vLLM {version} in {recipes_dir}",
            hint=f"`python -m toolchain new-recipe --vllm {version}` (nox -s new-recipe -- --vllm "
            f"{version}) writes one from the release's sdist; known versions: {known}",
        )
    models = load_isa_models(recipes_dir / ISA_MODELS_FILE)
    return parse_recipe(load_toml(path), path=path, models=models)


def _version(value: str, *, where: str) -> Version:
    try:
        return Version(value)
    except InvalidVersion as exc:
        raise DataFileError(f"{where}: '{value}' is not a version") from exc


# Every key a recipe may have, per table: a typo (`tar_sha265`) is an error, not ignored.
RECIPE_KEYS = {
    "": {"vllm", "source", "python", "torch", "build", "toolchain", "isa_model", "third_party",
         "drop_requirements", "patches", "onednn_prune", "compile_memory", "darwin",
         "inherited_from"},
    "source": {"sdist", "sha256", "git_tag"},
    "python": {"requires", "preferred"},
    "torch": {*SUPPORTED_ARCHES, "index"},
    "build": {"requires", "memory_per_job_mib"},
    "toolchain": {"gxx_min", "cmake_min"},
    "isa_model": set(SUPPORTED_ARCHES),
    "third_party": {"name", "arch", "repository", "ref", "commit", "archive", "tar_sha256", "env"},
    "drop_requirements": {"name", "reason"},
    "patches": {"file", "versions", "reason", "arch", "enables"},
    "onednn_prune": {"target", "arch", "file", "reason", "callers", "acl"},
    "compile_memory": {"what", "targets", "peak_mib", "pool", "arch"},
    "darwin": {"torch", "macos_min", "clang_min", "isa_model"},
}  # fmt: skip


def parse_recipe(data: dict[str, Any], *, path: Path, models: Mapping[str, IsaModel]) -> Recipe:
    where = str(path)
    check_keys(data, RECIPE_KEYS[""], where=where)
    source, python = table(data, "source", where=where), table(data, "python", where=where)
    torch, build = table(data, "torch", where=where), table(data, "build", where=where)
    tools, isa = table(data, "toolchain", where=where), table(data, "isa_model", where=where)
    for name, section in (
        ("source", source),
        ("python", python),
        ("torch", torch),
        ("build", build),
        ("toolchain", tools),
        ("isa_model", isa),
    ):
        check_keys(section, RECIPE_KEYS[name], where=f"{where} [{name}]")  # fmt: skip
    vllm = _version(string(data, "vllm", where=where), where=f"{where}: key 'vllm'")
    if path.name != f"vllm-{vllm}.toml":
        raise DataFileError(f"{where}: key 'vllm' says {vllm} but the file is named {path.name}")
    try:
        python_requires = SpecifierSet(string(python, "requires", where=f"{where} [python]"))
    except InvalidSpecifier as exc:
        raise DataFileError(f"{where} [python]: key 'requires' is not a version range") from exc
    torch_pins = {arch: string(torch, arch, where=f"{where} [torch]") for arch in SUPPORTED_ARCHES}
    for arch, pin in torch_pins.items():  # pinned with == (a range is not a pin)
        _version(pin, where=f"{where} [torch]: key '{arch}'")
    memory_mib = build.get("memory_per_job_mib")
    if not isinstance(memory_mib, int) or isinstance(memory_mib, bool) or memory_mib <= 0:
        raise DataFileError(f"{where} [build]: key 'memory_per_job_mib' must be a positive integer")
    isa_models = {
        arch: model_named(
            models,
            string(isa, arch, where=f"{where} [isa_model]"),
            arch,
            where=f"{where} [isa_model]: key '{arch}'",
        )
        for arch in SUPPORTED_ARCHES
    }
    inherited = _optional_string(data, "inherited_from", where=where)
    return Recipe(
        path=path,
        vllm=vllm,
        inherited_from=(
            None if inherited is None else _version(inherited, where=f"{where}: inherited_from")
        ),
        sdist=_file_name(source, "sdist", where=f"{where} [source]"),
        sha256=sha256_hex(source, "sha256", where=f"{where} [source]"),
        git_tag=_optional_string(source, "git_tag", where=f"{where} [source]"),
        python_requires=python_requires,
        python_preferred=string(python, "preferred", where=f"{where} [python]"),
        torch=torch_pins,
        torch_index=string(torch, "index", where=f"{where} [torch]", default=PYTORCH_CPU_INDEX),
        build_requires=string_list(build, "requires", where=f"{where} [build]"),
        memory_per_job_bytes=memory_mib * MIB,
        gxx_min=_gxx_min(tools, where=f"{where} [toolchain]"),
        cmake_min=_versions(
            {"cmake_min": string(tools, "cmake_min", where=f"{where} [toolchain]")}, where
        )["cmake_min"],
        isa_models=isa_models,
        third_party=tuple(
            _third_party(entry, where=f"{where} third_party[{index}]")
            for index, entry in enumerate(_array(data, "third_party", where))
        ),
        drop_requirements=tuple(
            DroppedRequirement(
                name=string(
                    _checked(entry, "drop_requirements", f"{where} drop_requirements[{i}]"),
                    "name",
                    where=f"{where} drop_requirements[{i}]",
                ),
                reason=string(entry, "reason", where=f"{where} drop_requirements[{i}]"),
            )
            for i, entry in enumerate(_array(data, "drop_requirements", where))
        ),
        patches=tuple(
            _patch(entry, vllm, folder=path.parent, where=f"{where} patches[{index}]")
            for index, entry in enumerate(_array(data, "patches", where))
        ),
        onednn_prune=_one_per_build(
            [
                _onednn_prune(
                    entry, isa_models, folder=path.parent, where=f"{where} onednn_prune[{i}]"
                )
                for i, entry in enumerate(_array(data, "onednn_prune", where))
            ],
            where=where,
        ),
        compile_memory=tuple(
            _compile_memory(entry, memory_mib, where=f"{where} compile_memory[{i}]")
            for i, entry in enumerate(_array(data, "compile_memory", where))
        ),
        darwin=_darwin(data["darwin"], models, where=f"{where} [darwin]")
        if "darwin" in data
        else None,
    )


def _darwin(data: Any, models: Mapping[str, IsaModel], *, where: str) -> DarwinRecipe:
    if not isinstance(data, dict):
        raise DataFileError(f"{where}: must be a table")
    check_keys(data, RECIPE_KEYS["darwin"], where=where)
    name = string(data, "isa_model", where=where)
    model = model_named(models, name, "aarch64", where=f"{where}: key 'isa_model'")
    floors = {key: string(data, key, where=where) for key in ("macos_min", "clang_min")}
    for key, value in floors.items():
        _version(value, where=f"{where}: key '{key}'")
    torch = string(data, "torch", where=where)
    _version(torch, where=f"{where}: key 'torch'")
    return DarwinRecipe(torch=torch, isa_model=model, **floors)


def _array(data: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise DataFileError(f"{where}: key '{key}' must be an array of tables ([[{key}]])")
    return value


def _checked(entry: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    check_keys(entry, RECIPE_KEYS[kind], where=where)
    return entry


def _optional_string(data: dict[str, Any], key: str, *, where: str) -> str | None:
    return string(data, key, where=where) if key in data else None


def _file_name(data: dict[str, Any], key: str, *, where: str) -> str:
    """A file name the toolkit puts in a folder of its own (the mirror, the sdist cache): one
    plain name, never a path that could write or delete elsewhere (`../x`, `/etc/x`)."""
    value = string(data, key, where=where)
    if value in (".", "..") or "/" in value or "\\" in value or "\0" in value:
        raise DataFileError(
            f"{where}: key '{key}' must be a plain file name, not {value!r}",
            hint="name the file only (e.g. oneDNN-3.10.tar.gz), then check the recipe with "
            "`python -m toolchain plan --recipes DIR`",
        )
    return value


def _file_inside(folder: Path, data: dict[str, Any], key: str, *, where: str) -> Path:
    """A file the recipe names relative to its folder; it must stay inside that folder, symlinks
    resolved (a recipe cannot make the build read, or patch with, a file from elsewhere)."""
    value = string(data, key, where=where)
    file = folder / value
    try:
        inside = folder.resolve() in file.resolve().parents
    except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL byte
        inside = False
    if Path(value).is_absolute() or not inside:
        raise DataFileError(
            f"{where}: key '{key}': {value!r} is not a file inside the recipes folder {folder}",
            hint="keep patches and prune lists in the recipes folder, named relative to it, "
            "then check the recipe with `python -m toolchain plan --recipes DIR`",
        )
    return file


def _read_bytes(file: Path, *, key: str, where: str) -> bytes:
    """The file's bytes, read once: what is hashed is what the build uses (a DataFileError for a
    file that is missing or cannot be read)."""
    hint = "restore the file, or fix the recipe; `python -m toolchain plan --recipes DIR` checks it"
    try:
        return file.read_bytes()
    except FileNotFoundError as exc:
        raise DataFileError(f"{where}: key '{key}': {file} does not exist", hint=hint) from exc
    except OSError as exc:
        raise DataFileError(
            f"{where}: key '{key}': {file} cannot be read ({exc.strerror or exc})", hint=hint
        ) from exc


def _versions(values: dict[str, str], where: str) -> dict[str, str]:
    """Compiler and cmake minimums must be versions (`gxx_min = "twelve"` is refused)."""
    for key, value in values.items():
        _version(value, where=f"{where} [toolchain]: key '{key}'")
    return values


def _gxx_min(tools: dict[str, Any], *, where: str) -> dict[str, str]:
    """g++ minimums by architecture: a key `x86-64` would drop the floor without a word."""
    floors = string_map(tools, "gxx_min", where=where)
    check_keys(floors, set(SUPPORTED_ARCHES), where=f"{where} gxx_min")
    for arch, value in floors.items():
        _version(value, where=f"{where} gxx_min: key '{arch}'")
    return floors


def _third_party(entry: dict[str, Any], *, where: str) -> ThirdParty:
    _checked(entry, "third_party", where)
    arch = entry.get("arch")
    if arch is not None and arch not in SUPPORTED_ARCHES:
        raise DataFileError(f"{where}: key 'arch' must be one of {', '.join(SUPPORTED_ARCHES)}")
    return ThirdParty(
        name=string(entry, "name", where=where),
        arch=arch,
        repository=string(entry, "repository", where=where),
        ref=string(entry, "ref", where=where),
        archive=_file_name(entry, "archive", where=where),
        env=string(entry, "env", where=where),
        commit=_optional_string(entry, "commit", where=where),
        tar_sha256=sha256_hex(entry, "tar_sha256", where=where) if "tar_sha256" in entry else None,
    )


def _onednn_prune(
    entry: dict[str, Any], models: Mapping[str, IsaModel], *, folder: Path, where: str
) -> OnednnPrune:
    _checked(entry, "onednn_prune", where)
    target = string(entry, "target", where=where)
    arch = _prune_arch(target, entry, models, where=where)
    file = _file_inside(folder, entry, "file", where=where)
    content = _read_bytes(file, key="file", where=where)
    try:
        text = content.decode()
    except UnicodeDecodeError as exc:
        raise DataFileError(
            f"{where}: key 'file': {file} is not UTF-8 text (byte {exc.start})",
            hint="make it anew from a finished build with `python -m toolchain learn-prune "
            "--vllm VERSION --target TARGET` (recipes/README.md)",
        ) from exc
    units = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if any(len(line.split()) != 2 for line in units):
        raise DataFileError(f"{where}: {file} must have one 'TARGET SOURCE' line per unit")
    return OnednnPrune(
        target=target,
        file=file,
        sha256=hashlib.sha256(content).hexdigest(),
        units=len(units),
        reason=string(entry, "reason", where=where),
        arch=arch,
        callers=_callers(entry, where=where),
        acl=_acl(entry, arch, where=where),
        content=content,
    )


def _acl(entry: dict[str, Any], arch: str, *, where: str) -> bool | None:
    acl = entry.get("acl")
    if acl is not None and (not isinstance(acl, bool) or arch != "aarch64"):
        raise DataFileError(
            f"{where}: key 'acl' must be true or false, and only for an aarch64 list, "
            f"got {acl!r} for {arch}",
            hint="learn-prune prints it for an aarch64 build",
        )
    return acl


def _callers(entry: dict[str, Any], *, where: str) -> str | None:
    callers = _optional_string(entry, "callers", where=where)
    if callers is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", callers):
        raise DataFileError(
            f"{where}: key 'callers' must be 'sha256:' and 64 hex digits, got {callers!r}",
            hint="learn-prune prints the value for the release it learned from",
        )
    return callers


def _one_per_build(prunes: list[OnednnPrune], *, where: str) -> tuple[OnednnPrune, ...]:
    """Two lists for one target and architecture: the build would take the first silently."""
    seen: set[tuple[str, str]] = set()
    for index, prune in enumerate(prunes):
        if (prune.target, prune.arch) in seen:
            raise DataFileError(
                f"{where} onednn_prune[{index}]: a second list for target '{prune.target}' on "
                f"{prune.arch}: keep one per target and architecture"
            )
        seen.add((prune.target, prune.arch))
    return tuple(prunes)


def _prune_arch(
    target: str, entry: dict[str, Any], models: Mapping[str, IsaModel], *, where: str
) -> str:
    """The entry's `arch`, whose ISA model must have its target; without one, the one
    architecture that has the target (units differ between x86 and Arm oneDNN builds)."""
    arch = _optional_string(entry, "arch", where=where)
    if arch is not None and arch not in models:
        raise DataFileError(f"{where}: key 'arch' must be one of {', '.join(models)}")
    having = [name for name, model in models.items() if target in model.targets]
    if arch is not None and arch not in having:
        raise DataFileError(
            f"{where}: key 'target': this recipe's {arch} ISA model ({models[arch].name}) "
            f"has no '{target}'"
        )
    if not having:
        raise DataFileError(f"{where}: key 'target': this recipe's ISA models have no '{target}'")
    if arch is None and len(having) > 1:
        raise DataFileError(
            f"{where}: target '{target}' is a target of {' and '.join(having)}: "
            "say which build the list was learned from with key 'arch'"
        )
    return arch or having[0]


def _compile_memory(entry: dict[str, Any], flat_mib: int, *, where: str) -> CompileMemory:
    _checked(entry, "compile_memory", where)
    targets = string_list(entry, "targets", where=where)
    # CMAKE_ARGS reaches cmake split at spaces and the list is comma-separated there
    bad = [name for name in targets if not re.fullmatch(r"[A-Za-z0-9_.+*-]+", name)]
    if not targets or bad:
        raise DataFileError(
            f"{where}: key 'targets' must list CMake target names ('*' matches any characters)"
            + (f", not {bad[0]!r}" if bad else "")
        )
    peak = entry.get("peak_mib")
    if not isinstance(peak, int) or isinstance(peak, bool) or peak <= 0:
        raise DataFileError(f"{where}: key 'peak_mib' must be a positive integer")
    if peak > flat_mib:
        raise DataFileError(
            f"{where}: peak_mib {peak} is above [build] memory_per_job_mib {flat_mib}, which "
            "must be the heaviest unit of the release"
        )
    pool = string(entry, "pool", where=where)
    if pool not in ("light", "heavy"):
        raise DataFileError(f"{where}: key 'pool' must be 'light' or 'heavy', not {pool!r}")
    arch = _optional_string(entry, "arch", where=where)
    if arch is not None and arch not in SUPPORTED_ARCHES:
        raise DataFileError(f"{where}: key 'arch' must be one of {', '.join(SUPPORTED_ARCHES)}")
    return CompileMemory(
        what=string(entry, "what", where=where),
        targets=tuple(targets),
        peak_bytes=peak * MIB,
        pool=pool,
        arch=arch,
    )


def _patch(entry: dict[str, Any], vllm: Version, *, folder: Path, where: str) -> Patch:
    _checked(entry, "patches", where)
    file = _file_inside(folder, entry, "file", where=where)
    content = _read_bytes(file, key="file", where=where)
    try:
        versions = SpecifierSet(string(entry, "versions", where=where))
    except InvalidSpecifier as exc:
        raise DataFileError(f"{where}: key 'versions' is not a version range") from exc
    if not versions.contains(vllm):
        raise DataFileError(f"{where}: {file.name} applies to vLLM {versions}, not {vllm}")
    arch = _optional_string(entry, "arch", where=where)
    if arch is not None and arch not in SUPPORTED_ARCHES:
        raise DataFileError(f"{where}: key 'arch' is one of {', '.join(SUPPORTED_ARCHES)}")
    return Patch(
        file=file,
        sha256=hashlib.sha256(content).hexdigest(),
        versions=versions,
        reason=string(entry, "reason", where=where),
        arch=arch,
        enables=string_list(entry, "enables", where=where) if "enables" in entry else (),
        content=content,
    )
