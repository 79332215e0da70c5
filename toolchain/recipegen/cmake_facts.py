"""Facts of a release's cmake/cpu_extension.cmake: its ISA era, g++ minimum and downloads.

Nothing here has a default: what the file says in a way this module does not know (a new
VLLM_CPU_* switch, a new kernel library, a new FetchContent download) stops with exit 4 and
names it, so a new era is described by hand in isa-eras.toml and isa-models.toml.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import DataFileError
from toolchain.targets import IsaModel
from toolchain.util.datafile import check_keys, load_toml, string, string_list, table
from toolchain.util.platform import SUPPORTED_ARCHES

ERAS_FILE = "isa-eras.toml"
OTHER_ARCHES = "other-architectures"


@dataclass(frozen=True, kw_only=True)
class Era:
    model: str
    arch: str
    switches: frozenset[str]
    extension_targets: frozenset[str] | None  # None: not part of this era's signature
    sysctl: frozenset[str] | None  # a macOS era: the sysctl names cmake asks; None: Linux
    patched_era: str | None = None  # an era of no cmake file: that era's with `patch` applied
    patch: str | None = None


@dataclass(frozen=True, kw_only=True)
class Download:
    """A third-party source cmake fetches, as the recipe's [[third_party]] names it."""

    name: str
    arch: str | None  # None: every architecture
    repository: str
    ref: str
    env: str  # the variable that points cmake at a local copy instead


# FetchContent names cmake uses -> (the recipe's name, the variable for a local copy, arch)
KNOWN_DOWNLOADS = {
    "oneDNN": ("oneDNN", "FETCHCONTENT_SOURCE_DIR_ONEDNN", None),
    "arm_compute": ("ComputeLibrary", "ACL_ROOT_DIR", "aarch64"),
}
AARCH64_BRANCH = re.compile(r"^\s*(else)?if\s*\(\s*ASIMD_FOUND\b")


def load_eras(path: Path, models: Mapping[str, IsaModel]) -> tuple[list[Era], frozenset[str]]:
    """The eras of isa-eras.toml, and the switches of architectures the toolkit does not build."""
    data, where = load_toml(path), str(path)
    ignored = frozenset(
        string_list(
            table(data, OTHER_ARCHES, where=where),
            "ignored_switches",
            where=f"{where} [{OTHER_ARCHES}]",
        )
    )
    eras = []
    for name in (key for key in data if key != OTHER_ARCHES):
        entry, at = table(data, name, where=where), f"{where} [{name}]"
        check_keys(entry, {"switches", "extension_targets", "sysctl", "patched_era", "patch"},
                   where=at)  # fmt: skip
        if name not in models:
            raise DataFileError(f"{at}: no ISA model of that name in isa-models.toml")
        patched = {key: string(entry, key, where=at) for key in ("patched_era", "patch")
                   if key in entry}  # fmt: skip
        if len(patched) == 1 or patched.get("patched_era", name) not in models:
            raise DataFileError(f"{at}: 'patched_era' names a model and goes with 'patch'")
        eras.append(
            Era(
                model=name,
                arch=models[name].arch,
                switches=_names(entry, "switches", at) or frozenset(),
                extension_targets=_names(entry, "extension_targets", at),
                sysctl=_names(entry, "sysctl", at),
                **patched,
            )
        )
    return eras, ignored


def patched_eras(found: Mapping[str, str], eras: list[Era], patches: set[str]) -> dict[str, str]:
    """arch -> ISA model, with an era's patched model where the recipe lists its patch."""
    result = dict(found)
    for era in eras:
        patched = era.patched_era is not None and era.patch in patches
        if patched and result.get(era.arch) == era.patched_era:
            result[era.arch] = era.model
    return result


def _names(entry: dict[str, object], key: str, where: str) -> frozenset[str] | None:
    return frozenset(string_list(entry, key, where=where)) if key in entry else None


def recognise_eras(
    text: str, eras: list[Era], ignored: frozenset[str], *, where: str
) -> dict[str, str]:
    """arch -> ISA model name, each from exactly one era of isa-eras.toml."""
    switches = set(re.findall(r"ENV\{(VLLM_CPU_\w+)\}", text))
    targets = set(re.findall(r"define_extension_target\(\s*(\w+)", text))
    unknown = switches - ignored - {s for era in eras for s in era.switches}
    if unknown:
        raise DataFileError(
            f"{where} reads switches no era of {ERAS_FILE} knows: {', '.join(sorted(unknown))}",
            hint=f"a new ISA era: describe it in {ERAS_FILE} and isa-models.toml",
        )
    found = {}
    for arch in SUPPORTED_ARCHES:
        mine = [
            era
            for era in eras
            if era.arch == arch and era.sysctl is None and era.patched_era is None
        ]
        seen = switches & {s for era in mine for s in era.switches}
        matches = [
            era.model for era in mine if era.switches == seen and _targets_match(era, targets)
        ]
        if len(matches) != 1:
            raise DataFileError(
                f"{where}: {arch} switches {sorted(seen) or 'none'} and kernel libraries "
                f"{sorted(targets)} match {len(matches)} eras of {ERAS_FILE} "
                f"({', '.join(matches) or 'none'}), not one",
                hint=f"a new ISA era: describe it in {ERAS_FILE} and isa-models.toml",
            )
        found[arch] = matches[0]
    return found


def recognise_darwin(text: str, eras: list[Era], *, where: str) -> str | None:
    """The macOS ISA model: the era whose sysctl names are exactly those cmake asks (check_sysctl);
    None when the file asks none (no macOS build)."""
    asked = frozenset(re.findall(r"check_sysctl\(\s*([\w.]+)", text))
    if not asked:
        return None
    matches = [era.model for era in eras if era.sysctl == asked]
    if len(matches) != 1:
        raise DataFileError(
            f"{where}: macOS sysctl names {sorted(asked)} match {len(matches)} eras of "
            f"{ERAS_FILE} ({', '.join(matches) or 'none'}), not one",
            hint=f"a new macOS era: describe it in {ERAS_FILE} and isa-models.toml",
        )
    return matches[0]


def _targets_match(era: Era, targets: set[str]) -> bool:
    return era.extension_targets is None or era.extension_targets == targets


def gxx_minimum(text: str, *, where: str) -> str:
    """The g++ version the x86 build requires (a FATAL_ERROR from 0.17, a warning before)."""
    found = re.findall(r"requires gcc/g\+\+ >= ([0-9]+(?:\.[0-9]+)*)", text)
    if not found:
        raise DataFileError(
            f"{where}: no 'requires gcc/g++ >= X' message: the g++ minimum is unknown"
        )
    versions = sorted(set(found), key=lambda v: tuple(int(p) for p in v.split(".")))
    return str(versions[-1])


def downloads(text: str, *, where: str) -> list[Download]:
    """Every git download (FetchContent_Declare / _Populate with GIT_TAG) of the file."""
    calls = list(re.finditer(r"FetchContent_(?:Declare|Populate)\(\s*(\w+)([^)]*)\)", text))
    found: list[Found] = []
    for call in calls:
        name, body = call.group(1), call.group(2)
        repo, tag = re.search(r"GIT_REPOSITORY\s+(\S+)", body), re.search(r"GIT_TAG\s+(\S+)", body)
        url = re.search(r"\bURL\s+(\S+)", body)
        if repo is None and tag is None and url is None:
            continue  # a local SOURCE_DIR, not a download
        if repo is None or tag is None or url is not None or "${" in repo.group(1) + tag.group(1):
            # a URL download, a git one without its tag, or one whose source is a variable:
            # left out, the recipe would lack the source (or name another arch's) in silence
            raise DataFileError(
                f"{where}: downloads '{name}' in a way the generator does not read "
                f"({' '.join(body.split())})",
                hint="the generator reads FetchContent downloads with a literal GIT_REPOSITORY "
                "and GIT_TAG; describe this release's sources by hand",
            )
        if name not in KNOWN_DOWNLOADS:
            raise DataFileError(
                f"{where}: downloads '{name}' ({repo.group(1)}), which the generator does not know",
                hint="add it to KNOWN_DOWNLOADS in toolchain/recipegen/cmake_facts.py",
            )
        found.append((name, repo.group(1), tag.group(1), _in_aarch64_branch(text, call.start())))
    for name in {entry[0] for entry in found}:
        env = KNOWN_DOWNLOADS[name][1]
        if f"ENV{{{env}}}" not in text:
            raise DataFileError(
                f"{where}: {name} is downloaded with no ${{ENV{{{env}}}}} to point at a local "
                "copy: an offline build could not give it one"
            )
    made = [_download(entry, found, where) for entry in found]
    for arch in SUPPORTED_ARCHES:
        if not any(d.name == "oneDNN" and d.arch in (None, arch) for d in made):
            raise DataFileError(
                f"{where}: no download of oneDNN for {arch} (a FetchContent_Declare with "
                "GIT_REPOSITORY and GIT_TAG): the recipe would not say which oneDNN to build",
                hint="describe this release's oneDNN source by hand",
            )
    return made


Found = tuple[str, str, str, bool]  # (fetch name, repository, ref, in the aarch64 branch)


def _download(entry: Found, every: list[Found], where: str) -> Download:
    name, repository, ref, aarch64 = entry
    recipe_name, env, arch = KNOWN_DOWNLOADS[name]
    same = [e for e in every if e[0] == name]
    if arch is None and len(same) == 2 and sorted(e[3] for e in same) == [False, True]:
        arch = "aarch64" if aarch64 else "x86_64"
    elif arch is None and same == [entry] and aarch64:
        arch = "aarch64"  # not every architecture's: the aarch64 branch's alone
    elif arch is None and len(same) != 1:
        raise DataFileError(f"{where}: {len(same)} downloads of {name} in branches not understood")
    return Download(name=recipe_name, arch=arch, repository=repository, ref=ref, env=env)


def _in_aarch64_branch(text: str, offset: int) -> bool:
    """Whether the nearest if/elseif/else line before `offset` opens the aarch64 branch."""
    before = text[:offset].splitlines()
    for line in reversed(before):
        if re.match(r"^\s*(if|elseif|else)\s*\(", line):
            return bool(AARCH64_BRANCH.match(line))
    return False
