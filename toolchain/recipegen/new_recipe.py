"""`new-recipe`: vllm-VERSION.toml written from the release's sdist and the shipped recipes."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from toolchain.errors import DataFileError, UsageError
from toolchain.plan.onednn_callers import callers_digest, sdist_callers
from toolchain.plan.recipes import parse_recipe, recipe_path
from toolchain.recipegen import facts
from toolchain.recipegen.cmake_facts import (
    ERAS_FILE,
    Download,
    downloads,
    gxx_minimum,
    load_eras,
    patched_eras,
    recognise_darwin,
    recognise_eras,
)
from toolchain.recipegen.inherit import (
    MEASURED_KEY,
    Shipped,
    patch_entries,
    preferred_python,
    third_party_extras,
)
from toolchain.recipegen.patch_check import DryRun, dry_run
from toolchain.recipegen.render import Section, render
from toolchain.recipegen.sdist import (
    APPLE_DOCS,
    CPU_EXTENSION,
    FACT_FILES,
    SdistFiles,
    patch_targets,
    read_sdist,
)
from toolchain.targets import ISA_MODELS_FILE, load_isa_models
from toolchain.util.files import atomic_path
from toolchain.util.platform import SUPPORTED_ARCHES

PATCHES_DIR = "patches"


@dataclass(frozen=True, kw_only=True)
class Generated:
    name: str  # vllm-0.33.0.toml
    text: str
    dry_runs: tuple[DryRun, ...]
    notes: tuple[str, ...]  # what a reviewer must know: patches left out, figures inherited


def shipped_patches(recipes_dir: Path) -> list[Path]:
    return sorted((recipes_dir / PATCHES_DIR).glob("*.patch"))


ISA_HEADER = "[isa_model]"


def files_read(patches: Iterable[Path]) -> set[str]:
    """The sdist files the generator reads: its facts and what the patches change."""
    return set(FACT_FILES).union(*(patch_targets(patch) for patch in patches))


def generate(version: Version, sdist: Path, sha256: str, recipes_dir: Path) -> Generated:
    """The recipe of `version` from its sdist (a .tar.gz) and `recipes_dir`."""
    patches = shipped_patches(recipes_dir)
    files = read_sdist(sdist, files_read(patches))
    found = facts.sdist_version(files)
    if Version(found) != version:
        raise DataFileError(f"{files.name} is vLLM {found}, not {version}")
    draft = _Draft(version, files, Shipped.load(recipes_dir, leave_out=version), recipes_dir)
    sections = draft.sections(sdist_name=f"vllm-{version}.tar.gz", sha256=sha256)
    runs = tuple(dry_run(patches, files))
    listed = draft.patches(runs)
    # a listed patch can make the era's model (arm-tiers: arm-switches with the tiers patch)
    names = {Path(str(entry.keys["file"])).name for entry in listed}
    draft.isa = patched_eras(draft.isa, draft.eras, names)
    sections = [draft.isa_section() if s.header == ISA_HEADER else s for s in sections]
    sections += listed
    sections += draft.prune(callers_digest(sdist_callers(sdist)))
    name = recipe_path(recipes_dir, str(version)).name
    text = render(draft.header(), sections)
    models = load_isa_models(recipes_dir / ISA_MODELS_FILE)
    parse_recipe(tomllib.loads(text), path=recipes_dir / name, models=models)  # loads as shipped
    return Generated(name=name, text=text, dry_runs=runs, notes=tuple(draft.notes))


def write_recipe(generated: Generated, to: Path, *, force: bool) -> Path:
    final = to / generated.name
    refuse_existing(final, force=force)
    with atomic_path(final) as temporary:
        temporary.write_text(generated.text)
    return final


def refuse_existing(final: Path, *, force: bool) -> None:
    if final.exists() and not force:
        raise UsageError(f"{final} exists", hint="--force overwrites it; --to DIR writes elsewhere")


class _Draft:
    """The facts of one release, turned into the recipe's sections one at a time."""

    def __init__(self, version: Version, files: SdistFiles, shipped: Shipped, folder: Path):
        self.version, self.files, self.shipped = version, files, shipped
        self.notes: list[str] = []
        where = f"{files.name} {CPU_EXTENSION}"
        cmake = files.text(CPU_EXTENSION)
        models = load_isa_models(folder / ISA_MODELS_FILE)
        eras, ignored = load_eras(folder / ERAS_FILE, models)
        self.isa = recognise_eras(cmake, eras, ignored, where=where)
        self.eras = eras
        self.darwin_isa = recognise_darwin(cmake, eras, where=where)
        self.models = models
        self.gxx = gxx_minimum(cmake, where=where)
        self.downloads = downloads(cmake, where=where)
        self.requirements = facts.requirements(files)
        self.requires = facts.python_requires(files)
        self.cmake_min = facts.cmake_minimum(files)
        found = shipped.measured_source(version)
        if found is None:
            raise DataFileError(
                f"no recipe in {folder} has measured figures (memory_per_job_mib) to inherit",
                hint=f"a measured recipe is one without the key '{MEASURED_KEY}'",
            )
        self.measured, self.measured_recipe, self.inherited = found

    def header(self) -> str:
        deps = ", ".join(
            f"{d.name} {d.ref}" + (f" ({d.arch})" if d.arch else "") for d in self.downloads
        )
        req = self.requirements.build_file
        return (
            f"vLLM {self.version}: written by `python -m toolchain new-recipe --vllm "
            f"{self.version}` "
            f"from the PyPI sdist vllm-{self.version}.tar.gz: pyproject.toml (requires-python), "
            f"{req} (build pins), requirements/cpu.txt and {req} (torch pins, by their "
            f"environment markers; on macOS torch {self.requirements.torch['Darwin']}), "
            f"CMakeLists.txt (cmake {self.cmake_min}), {CPU_EXTENSION} (g++ >= {self.gxx}, "
            f"{deps}, the ISA models {self.isa['x86_64']} and {self.isa['aarch64']}). "
            "Review it against its neighbours before shipping it (recipes/README.md)."
        )

    def sections(self, *, sdist_name: str, sha256: str) -> list[Section]:
        top: dict[str, Any] = {"vllm": str(self.version)}
        comments = {}
        if self.inherited:
            top[MEASURED_KEY] = str(self.measured)
            comments[MEASURED_KEY] = (
                "Not measured for this release: memory_per_job_mib and [[compile_memory]] are "
                f"those of {self.measured}, the nearest measured release. Its [[onednn_prune]] "
                "lists are inherited only where they hold, each saying why."
            )
        return [
            Section(header="", keys=top, comments=comments),
            Section(
                header="[source]",
                keys={"sdist": sdist_name, "sha256": sha256, "git_tag": f"v{self.version}"},
            ),
            self._python(),
            self._torch(),
            *self._darwin(),
            *self._build(),
            Section(
                header="[toolchain]",
                keys={"gxx_min": {"x86_64": self.gxx}, "cmake_min": self.cmake_min},
            ),
            self.isa_section(),
            *(self._third_party(d) for d in _ordered(self.downloads)),
            *self._drop_requirements(),
        ]

    def isa_section(self) -> Section:
        return Section(header=ISA_HEADER, keys=dict(self.isa))

    def _python(self) -> Section:
        preferred, why = preferred_python(self.shipped, SpecifierSet(self.requires), self.version)
        return Section(
            header="[python]",
            keys={"requires": self.requires, "preferred": preferred},
            comments={"preferred": f"Not in the sdist: {why}."},
        )

    def _torch(self) -> Section:
        pins = {arch: self.requirements.torch[arch] for arch in SUPPORTED_ARCHES}
        comments = {
            arch: f"On {arch} this release pins PyPI's torch (a CPU build there), not the CPU "
            "index's."
            for arch, pin in pins.items()
            if "+cpu" not in pin
        }
        return Section(header="[torch]", keys=pins, comments=comments)

    def _darwin(self) -> list[Section]:
        if self.darwin_isa is None:
            self.notes.append(f"{CPU_EXTENSION} asks no macOS sysctl: no [darwin] table")
            return []
        macos_min, clang_min = facts.apple_floors(self.files)
        torch = self.requirements.torch["Darwin"]
        keys = {"torch": torch, "macos_min": macos_min, "clang_min": clang_min}
        comments = {
            "": "macOS on Apple Silicon, planned from a Mac's saved sysctl and vm_stat; not yet "
            "built on a Mac.",
            "torch": f'{self.requirements.build_file}\'s pin where platform_system == "Darwin": '
            "PyPI's torch, a CPU build on macOS (no +cpu local version there).",
            "macos_min": f"{APPLE_DOCS}: the macOS and Apple Clang it names. Not checked against "
            f"the macOS tags of torch {torch}'s wheels (pip's resolver can tell).",
            "isa_model": f"From the sysctl names {CPU_EXTENSION} asks the build Mac.",
        }
        keys["isa_model"] = self.darwin_isa
        return [Section(header="[darwin]", keys=keys, comments=comments)]

    def _build(self) -> list[Section]:
        keys: dict[str, Any] = {"requires": list(self.requirements.build_requires)}
        comments = {"requires": f"{self.requirements.build_file} without torch (pinned above)."}
        source = self.measured_recipe
        keys["memory_per_job_mib"] = source["build"]["memory_per_job_mib"]
        comments["memory_per_job_mib"] = self._measured_comment()
        memory = [
            Section(
                header="[[compile_memory]]",
                keys=entry,
                comments={"": self._measured_comment()} if i == 0 else {},
            )
            for i, entry in enumerate(source.get("compile_memory", []))
        ]
        return [Section(header="[build]", keys=keys, comments=comments), *memory]

    def _measured_comment(self) -> str:
        if self.inherited:
            return (
                f"Inherited from {self.measured} ({MEASURED_KEY}): not measured for this release."
            )
        return "Measured for this release: kept from the recipe this one replaces."

    def _prune_comment(self, arch: str) -> str:
        if not self.inherited:
            return self._measured_comment()
        return (
            f"{self._measured_comment()} Same oneDNN ({_onednn_ref_of(self.downloads, arch)}) "
            "and the same oneDNN callers (`callers`): the same units link."
        )

    def _third_party(self, dep: Download) -> Section:
        keys: dict[str, Any] = {"name": dep.name}
        keys.update({"arch": dep.arch} if dep.arch else {})
        keys.update({"repository": dep.repository, "ref": dep.ref})
        extras = third_party_extras(self.shipped, self.version, dep.name, dep.repository, dep.ref)
        if _is_commit(dep.ref):
            extras.setdefault("commit", dep.ref)
        keys.update({"commit": extras["commit"]} if "commit" in extras else {})
        keys["archive"] = f"{dep.name}-{dep.ref.removeprefix('v')}.tar.gz"
        comments = {}
        if "tar_sha256" in extras:
            keys["tar_sha256"] = extras["tar_sha256"]
        else:
            comments["env"] = (
                "No tar_sha256: no shipped recipe records this source at this ref and no sdist "
                "holds it. fetch-sources records it on first use (sources.lock.json) and prints "
                "the line to paste here."
            )
            self.notes.append(f"{dep.name} {dep.ref}: no tar_sha256 recorded yet")
        keys["env"] = dep.env
        return Section(header="[[third_party]]", keys=keys, comments=comments)

    def _drop_requirements(self) -> list[Section]:
        return [
            Section(
                header="[[drop_requirements]]",
                keys={"name": name, "reason": facts.drop_reason(url)},
                comments={
                    "": "requirements/cpu.txt asks for it by a direct URL, which no "
                    "offline install or index upload accepts; the wheel leaves it out."
                },
            )
            for name, url in sorted(self.requirements.direct_urls.items())
        ]

    def patches(self, runs: tuple[DryRun, ...]) -> list[Section]:
        entries = patch_entries(self.shipped, self.version)
        listed = []
        for run in runs:
            file = f"{PATCHES_DIR}/{run.patch.name}"
            entry = entries.get(file)
            if entry is None:
                self.notes.append(f"{file}: no recipe says what it is for: not listed")
                continue
            in_range = SpecifierSet(entry["versions"]).contains(self.version)
            if run.applies and in_range:
                listed.append(Section(header="[[patches]]", keys=entry))
            elif run.applies:
                self.notes.append(
                    f"{file} applies, but its range is {entry['versions']}: not listed (widen "
                    "the range where it is listed if this release needs it)"
                )
            elif in_range:
                self.notes.append(f"{file} does NOT apply: not listed; " + "; ".join(run.failures))
        return listed

    def prune(self, callers: str) -> list[Section]:
        """The measured release's prune lists, for a release with the same oneDNN and the same
        oneDNN callers (`callers`, this sdist's digest): it links the same units."""
        kept = []
        for entry in self.measured_recipe.get("onednn_prune", []):
            arch = self._prune_arch(entry)
            if arch is None:
                why_not: str | None = "no such target here"
            else:
                why_not = self._not_inherited(entry, arch, callers)
            if arch is not None and why_not is None:
                comments = {"": self._prune_comment(arch)}
                kept.append(Section(header="[[onednn_prune]]", keys=entry, comments=comments))
            else:
                self.notes.append(
                    f"{self.measured}'s oneDNN prune list for {entry.get('target')} not "
                    f"inherited: {why_not}"
                )
        return kept

    def _prune_arch(self, entry: dict[str, Any]) -> str | None:
        """The architecture of a list's build (its `arch`, else the one whose ISA model has the
        target), when this release has that target there."""
        target = entry.get("target")
        having = [a for a, model in self.isa.items() if target in self.models[model].targets]
        arch = entry.get("arch") or (having[0] if len(having) == 1 else None)
        return arch if arch in having else None

    def _not_inherited(self, entry: dict[str, Any], arch: str, callers: str) -> str | None:
        """Why the measured release's list would be wrong here; None: it holds."""
        if _onednn_ref(self.measured_recipe, arch) != _onednn_ref_of(self.downloads, arch):
            return f"another oneDNN on {arch}"
        if "callers" not in entry:
            return "it records no oneDNN callers (learn-prune records them)"
        if entry["callers"] != callers:
            return (
                f"this release calls oneDNN from other code ({callers}, not {entry['callers']}): "
                "learn its own list from a build (learn-prune)"
            )
        return None


def _ordered(deps: list[Download]) -> list[Download]:
    names, arches = ["oneDNN", "ComputeLibrary"], [None, "x86_64", "aarch64"]
    return sorted(deps, key=lambda d: (names.index(d.name), arches.index(d.arch)))


def _is_commit(ref: str) -> bool:
    return len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)


def _onednn_ref(recipe: dict[str, Any], arch: str) -> str | None:
    for entry in recipe.get("third_party", []):
        if entry.get("name") == "oneDNN" and entry.get("arch") in (None, arch):
            return str(entry["ref"])
    return None


def _onednn_ref_of(deps: list[Download], arch: str) -> str | None:
    return next((d.ref for d in deps if d.name == "oneDNN" and d.arch in (None, arch)), None)
