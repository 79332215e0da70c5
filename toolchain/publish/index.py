"""A static package index: one PEP 503 + PEP 691 simple index per ISA variant.

pip cannot tell CPUs apart: given `0.32.0+cpu.avx2` and `0.32.0+cpu.avx512bf16` on one index it
takes the highest label, not the one the CPU runs. So each variant gets its own index (as PyTorch
and llama-cpp-python do), under one root:

    ROOT/variants.json                  variant -> features a CPU needs, projects, versions
    ROOT/files/NAME.whl(.metadata)      every wheel once, with its core metadata (PEP 658/714)
    ROOT/VARIANT/simple/index.{html,json}
    ROOT/VARIANT/simple/PROJECT/index.{html,json}

ROOT is a symlink to a generation folder beside it; a new generation is written in full, checked,
then swapped in with one rename, so a reader never sees half an index. Writers take a lock file
beside ROOT, one at a time; each wheel is copied (not linked), so what was validated is what is
served even when the wheel folder changes later.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from toolchain.errors import DataFileError, PublishError
from toolchain.publish import wheel_variants
from toolchain.publish.index_check import validate
from toolchain.targets import TargetCatalog, read_label, shipped_catalog
from toolchain.util.files import file_lock, sha256_file
from toolchain.wheelfile import check_wheel, core_metadata, read_manifest

# a variant is a folder name in the index: no path separators, no "..", nothing hidden
VARIANT_NAME = re.compile(r"[a-z0-9][a-z0-9_]*", re.IGNORECASE)
API_VERSION = "1.1"
FORMAT = "vcb-index-1"  # part of each generation's name: a new layout makes a new generation
VARIANTS_FORMAT = (
    "wheel-variants-2"  # 2: variant copies in wheel-variants/files/, portable fallback
)
FILES = "../../../files/"  # from VARIANT/simple/PROJECT/ to ROOT/files/
VARIANT_FILES = "../../files/"  # from wheel-variants/simple/PROJECT/ to wheel-variants/files/


@dataclass(frozen=True, kw_only=True)
class IndexedWheel:
    path: Path
    project: str
    version: str
    variant: str
    min_isa: tuple[str, ...]
    sha256: str
    size: int
    requires_python: str | None
    metadata: bytes

    @property
    def metadata_sha256(self) -> str:
        return hashlib.sha256(self.metadata).hexdigest()


def variant_of(wheel: Path, catalog: TargetCatalog) -> tuple[str, tuple[str, ...]]:
    """(variant, min_isa): from the toolkit's manifest, else from the `+cpu.TARGET` label, whose
    target is looked up in the wheel's era and architecture."""
    _, parsed, _, tags = parse_wheel_filename(wheel.name)
    version = Version(str(parsed))
    label = read_label(version)
    if label is None:
        raise PublishError(
            f"{wheel.name}: version {version} has no '+cpu' label, and vLLM only picks its "
            "CPU platform when its version contains 'cpu'",
            hint="publish wheels built by `nox -s build-wheel` (they are tagged +cpu.TARGET)",
        )
    manifest = read_manifest(wheel) or {}
    target = manifest.get("target_isa") or label.variant
    labelled = catalog.wheel_target(version, {tag.platform for tag in tags})
    min_isa = manifest.get("min_isa") or (labelled.min_isa if labelled else ())
    if not isinstance(target, str) or not VARIANT_NAME.fullmatch(target):
        raise PublishError(
            f"{wheel.name}: target {target!r} is not a variant name (letters, digits, '_')",
            hint="publish wheels built by `nox -s build-wheel`; nothing was published",
        )
    if not isinstance(min_isa, list | tuple) or not all(isinstance(f, str) for f in min_isa):
        raise PublishError(f"{wheel.name}: its manifest's min_isa is not a list of names")
    return target, tuple(min_isa)


def read_wheel(path: Path, catalog: TargetCatalog) -> IndexedWheel:
    try:
        check_wheel(path)
    except DataFileError as exc:
        raise PublishError(f"{exc.message}; nothing was published", hint=exc.hint) from exc
    name, version, _, _ = parse_wheel_filename(path.name)
    variant, min_isa = variant_of(path, catalog)
    return index_entry(path, canonicalize_name(name), str(version), variant, min_isa)


def index_entry(
    path: Path, project: str, version: str, variant: str, min_isa: tuple[str, ...]
) -> IndexedWheel:
    metadata = core_metadata(path)
    requires_python = next(
        (
            line.split(":", 1)[1].strip()
            for line in metadata.decode().splitlines()
            if line.startswith("Requires-Python:")
        ),
        None,
    )
    return IndexedWheel(
        path=path,
        project=project,
        version=version,
        variant=variant,
        min_isa=min_isa,
        sha256=sha256_file(path),
        size=path.stat().st_size,
        requires_python=requires_python,
        metadata=metadata,
    )


def _page(title: str, body: Iterable[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        + "".join(f"{line}<br/>\n" for line in body)
        + "</body>\n</html>\n"
    )


def file_url(name: str, files: str = FILES) -> str:
    return f"{files}{quote(name)}"  # '+' as %2B, as PyTorch's index does


def project_html(
    project: str,
    wheels: Sequence[IndexedWheel],
    others: Sequence[tuple[str, str]] = (),
    files: str = FILES,
) -> str:
    """The project page; `others` are (file name, sha256) of files that are not wheels."""
    links = [
        f'<a href="{html.escape(f"{file_url(name, files)}#sha256={digest}")}">'
        f"{html.escape(name)}</a>"
        for name, digest in others
    ]
    for wheel in wheels:
        attrs = f' data-dist-info-metadata="sha256={wheel.metadata_sha256}"'
        attrs += f' data-core-metadata="sha256={wheel.metadata_sha256}"'
        if wheel.requires_python:
            attrs += f' data-requires-python="{html.escape(wheel.requires_python)}"'
        href = html.escape(f"{file_url(wheel.path.name, files)}#sha256={wheel.sha256}")
        links.append(f'<a href="{href}"{attrs}>{html.escape(wheel.path.name)}</a>')
    return _page(f"Links for {project}", links)


def project_json(
    project: str,
    wheels: Sequence[IndexedWheel],
    others: Sequence[tuple[str, str]] = (),
    files: str = FILES,
) -> dict[str, Any]:
    return {
        "meta": {"api-version": API_VERSION},
        "name": project,
        "versions": sorted({w.version for w in wheels}, key=Version),
        "files": [
            {"filename": name, "url": file_url(name, files), "hashes": {"sha256": digest}}
            for name, digest in others
        ]
        + [
            {
                "filename": w.path.name,
                "url": file_url(w.path.name, files),
                "hashes": {"sha256": w.sha256},
                "requires-python": w.requires_python,
                "core-metadata": {"sha256": w.metadata_sha256},
                "dist-info-metadata": {"sha256": w.metadata_sha256},
                "size": w.size,
            }
            for w in wheels
        ],
    }


def root_html(projects: Iterable[str]) -> str:
    return _page("Simple index", (f'<a href="{p}/">{p}</a>' for p in projects))


def root_json(projects: Iterable[str]) -> dict[str, Any]:
    return {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]}


def generation_name(wheels: Sequence[IndexedWheel], *, wheel_variants: bool = False) -> str:
    digest = hashlib.sha256(f"{FORMAT}{f' {VARIANTS_FORMAT}' if wheel_variants else ''}".encode())
    for wheel in sorted(wheels, key=lambda w: w.path.name):
        digest.update(f"{wheel.path.name} {wheel.sha256}\n".encode())
    return f"gen-{digest.hexdigest()[:16]}"


def write_generation(
    wheels: Sequence[IndexedWheel], folder: Path, *, wheel_variants: bool = False
) -> tuple[str, ...]:
    """Write a whole index into `folder`; returns notes on what wheel variants left out."""
    files = folder / "files"
    files.mkdir(parents=True)
    for wheel in wheels:
        # a copy: a hard link would change the served file when the wheel folder's copy is
        # overwritten in place, and pip would then reject the index's hashes
        shutil.copyfile(wheel.path, files / wheel.path.name)
        (files / f"{wheel.path.name}.metadata").write_bytes(wheel.metadata)
    variants: dict[str, dict[str, Any]] = {}
    for variant in sorted({w.variant for w in wheels}):
        members = [w for w in wheels if w.variant == variant]
        projects = sorted({w.project for w in members})
        simple = folder / variant / "simple"
        _write_pair(simple, root_html(projects), root_json(projects))
        for project in projects:
            mine = sorted((w for w in members if w.project == project), key=lambda w: w.path.name)
            _write_pair(simple / project, project_html(project, mine), project_json(project, mine))
        variants[variant] = {
            "simple": f"{variant}/simple/",
            "min_isa": sorted({f for w in members for f in w.min_isa}),
            "projects": {
                p: sorted({w.version for w in members if w.project == p}) for p in projects
            },
        }
    (folder / "variants.json").write_text(json.dumps({"variants": variants}, indent=2) + "\n")
    (folder / "index.html").write_text(
        _page("vLLM CPU wheels", (f'<a href="{v}/simple/">{v}</a>' for v in variants))
    )
    return _write_wheel_variants(wheels, folder) if wheel_variants else ()


def _write_wheel_variants(wheels: Sequence[IndexedWheel], folder: Path) -> tuple[str, ...]:
    """ROOT/wheel-variants/simple/: each release's variant wheels, fallback and variants.json, in
    ROOT/wheel-variants/files/ (never ROOT/files/: a fallback copy can have a wheel's own name)."""
    files, notes = folder / wheel_variants.FOLDER / "files", []
    files.mkdir(parents=True)
    pages: dict[str, tuple[list[IndexedWheel], list[tuple[str, str]]]] = {}
    releases: dict[tuple[str, str], list[IndexedWheel]] = {}
    for wheel in wheels:
        if "x86_64" in wheel.path.name.rsplit("-", 1)[-1]:
            releases.setdefault((wheel.project, Version(wheel.version).public), []).append(wheel)
    for (project, public), builds in sorted(releases.items()):
        release = wheel_variants.release_variants(builds, files)
        if release is None:
            notes.append(f"{project} {public}: no build maps to an x86-64 level: no variants")
            continue
        notes += release.notes
        indexed, others = pages.setdefault(project, ([], []))
        for path, level in release.wheels:
            label = wheel_variants.LABEL_PREFIX + level if level else "null"
            isa = tuple(sorted(wheel_variants.LEVELS[level])) if level else ()
            derived = index_entry(path, project, release.version, label, isa)
            (files / f"{path.name}.metadata").write_bytes(derived.metadata)
            indexed.append(derived)
        others.append((release.metadata_file.name, sha256_file(release.metadata_file)))
    simple = folder / wheel_variants.FOLDER / "simple"
    _write_pair(simple, root_html(sorted(pages)), root_json(sorted(pages)))
    for project, (indexed, others) in sorted(pages.items()):
        indexed.sort(key=lambda w: w.path.name)
        _write_pair(
            simple / project,
            project_html(project, indexed, sorted(others), VARIANT_FILES),
            project_json(project, indexed, sorted(others), VARIANT_FILES),
        )
    return tuple(notes)


def _write_pair(folder: Path, page: str, data: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.html").write_text(page)
    (folder / "index.json").write_text(json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True, kw_only=True)
class Published:
    root: Path
    generation: Path
    changed: bool
    wheels: tuple[IndexedWheel, ...]
    notes: tuple[str, ...] = ()


def publish_index(
    wheel_paths: Sequence[Path],
    root: Path,
    *,
    wheel_variants: bool = False,
    catalog: TargetCatalog | None = None,
) -> Published:
    """Make `root` serve exactly these wheels; unchanged input changes nothing. A wheel without
    a manifest needs what its label's target needs in `catalog` (default: the shipped recipes)."""
    if root.exists() and not root.is_symlink():
        raise PublishError(
            f"{root} is a folder, not an index this tool made (a symlink to a generation)",
            hint="choose another --index-dir, or move that folder away",
        )
    wheels = read_wheels(wheel_paths, catalog)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(root.with_name(f".{root.name}.lock"), what="publish", wait=True):
            return _publish_locked(wheels, root, wheel_variants)
    except OSError as exc:
        now = f"{root} still serves {os.readlink(root)}" if root.is_symlink() else "no index yet"
        raise PublishError(
            f"could not write the index ({exc}); nothing was changed: {now}",
            hint="free disk space or fix the folder's permissions, then publish again",
        ) from exc


def _publish_locked(
    wheels: tuple[IndexedWheel, ...], root: Path, variants: bool = False
) -> Published:
    generations = root.parent / f".{root.name}.generations"
    generation = generations / generation_name(wheels, wheel_variants=variants)
    _remove_leftovers(root, generations)  # of killed runs: only the lock holder writes here
    if root.is_symlink() and root.resolve() == generation.resolve() and generation.is_dir():
        return Published(root=root, generation=generation, changed=False, wheels=wheels)
    partial = generations / f".{generation.name}.{os.getpid()}.part"
    try:
        notes = write_generation(wheels, partial, wheel_variants=variants)
        problems = validate(partial)
        if problems:
            raise PublishError("the new index does not validate: " + "; ".join(problems))
        shutil.rmtree(generation, ignore_errors=True)  # never the live one: that returned above
        partial.rename(generation)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    previous = root.resolve() if root.is_symlink() else None
    swap = root.with_name(f".{root.name}.{os.getpid()}.link")
    swap.unlink(missing_ok=True)
    swap.symlink_to(os.path.relpath(generation, root.parent))
    swap.replace(root)  # one rename: readers see the old index or the new one
    _prune(root, generations, keep={generation.name, previous.name if previous else ""})
    return Published(root=root, generation=generation, changed=True, wheels=wheels, notes=notes)


def _remove_leftovers(root: Path, generations: Path) -> None:
    """Partial generations and swap links of runs that were killed."""
    for partial in generations.glob(".gen-*.part"):
        shutil.rmtree(partial, ignore_errors=True)
    for link in root.parent.glob(f".{root.name}.*.link"):
        link.unlink(missing_ok=True)


def read_wheels(
    wheel_paths: Sequence[Path], catalog: TargetCatalog | None = None
) -> tuple[IndexedWheel, ...]:
    """Every wheel read and checked; PublishError naming the first that is not fit to publish."""
    if not wheel_paths:
        raise PublishError("no wheels to publish", hint="build one first: nox -s build-wheel")
    catalog = catalog or shipped_catalog()
    wheels = tuple(read_wheel(path, catalog) for path in sorted(wheel_paths))
    _refuse_duplicates(wheels)
    return wheels


def _refuse_duplicates(wheels: Sequence[IndexedWheel]) -> None:
    names: dict[str, IndexedWheel] = {}
    for wheel in wheels:
        other = names.setdefault(wheel.path.name, wheel)
        if other is not wheel:
            raise PublishError(f"{wheel.path.name} is given twice ({other.path}, {wheel.path})")


def _prune(root: Path, generations: Path, keep: set[str]) -> None:
    """Remove generations older than the previous one (a reader may still be inside that);
    never the one `root` points to now."""
    keep = keep | ({root.resolve().name} if root.is_symlink() else set())
    for old in generations.iterdir():
        if old.name not in keep and old.name.startswith("gen-"):
            shutil.rmtree(old, ignore_errors=True)
