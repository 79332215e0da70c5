"""The pip commands that install the right vLLM wheel for this machine from an internal index.

The internal package comes only from the internal index, with `--index-url` (an
`--extra-index-url` would let a public package of the same name win: dependency confusion). Its
public requirements are a separate pip run against the public index, with the PyTorch CPU index or
local wheel folders for the `torch==X+cpu` pin. On an index with several `+cpu.TARGET` builds of
one release, the exact version this CPU runs is pinned, since pip would take the highest label.
"""

from __future__ import annotations

import platform
import shlex
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import packaging
from packaging.tags import Tag, parse_tag, sys_tags
from packaging.utils import canonicalize_name
from packaging.version import Version

from toolchain.errors import DataFileError, PublishError
from toolchain.publish import wheel_variants
from toolchain.publish.index import target_min_isa
from toolchain.publish.served import (
    Wheels,
    nothing_left,
    printable,
    read_variants_json,
    tags_of,
    variant_label,
    version_of,
    wheel_files,
)
from toolchain.runtime_deps import PipSources, RuntimePlan, plan_requirements
from toolchain.settings import PYPI_SIMPLE
from toolchain.util import run
from toolchain.util.index_env import CREDENTIALS_NOTE, shown_command
from toolchain.util.simple_api import IndexFile, project_files, read_url
from toolchain.wheelfile import metadata_requirements, requires_dist

NO_VARIANT_HINT = (
    "publish a wheel this CPU runs: build one for a lower target (`build-wheel --target T`; "
    "README: `plan`, Targets)"
)
# Run by the target Python with this toolkit's (pure-Python) packaging on its path: a venv made
# for uv has no pip to ask.
TAGS_OF = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from packaging.tags import sys_tags; print(*sys_tags())"
)
NO_SOURCES = PipSources()  # pip's own configuration only


@dataclass(frozen=True, kw_only=True)
class Candidate:
    filename: str
    url: str
    version: Version
    variant: str
    min_isa: tuple[str, ...]
    metadata_url: str | None
    simple_url: str


@dataclass(frozen=True, kw_only=True)
class InstallPlan:
    chosen: Candidate
    deps: RuntimePlan
    commands: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """Comments, then the commands shell-quoted; each line escaped (`install-command | sh`
        runs it: a newline from the index must not start a command of its own)."""
        lines = [
            f"# {self.chosen.filename}: +{self.chosen.variant}, needs "
            f"{' '.join(self.chosen.min_isa) or 'nothing beyond the architecture'}"
        ]
        if self.deps.left_out:
            lines.append(f"# left out {self.deps.describe_left_out()}")
        lines += [f"# {note}" for note in self.notes]
        shown = [shown_command(command) for command in self.commands]
        lines += [f"# {CREDENTIALS_NOTE}"] if any(hidden for _, hidden in shown) else []
        lines += [shlex.join(argv) for argv, _ in shown]
        return "\n".join(printable(line) for line in lines)


def fetch(url: str) -> bytes:
    """The body at `url`; PublishError when the index cannot be read."""
    try:
        return read_url(url)[0]
    except OSError as exc:
        raise PublishError(
            f"cannot read {printable(f'{url}: {exc}')}", hint="check --index"
        ) from exc


def runnable_indexes(
    index: str, host_isa: Mapping[str, bool], project: str
) -> list[tuple[str, tuple[str, ...] | None]]:
    """(simple URL, features its wheels need) for each index that may hold a wheel for here.

    A root published by `publish` lists its variants in variants.json; any other URL is one flat
    simple index (pypiserver, devpi) on which variants differ only by their version label.
    """
    root = index.rstrip("/") + "/"
    try:
        body = fetch(urllib.parse.urljoin(root, "variants.json"))
    except PublishError:
        return [(root, None)]
    variants = read_variants_json(body, root)
    found: list[tuple[str, tuple[str, ...] | None]] = [
        (variant.simple_url, variant.min_isa)
        for variant in variants
        if canonicalize_name(project) in variant.projects
        and all(host_isa.get(feature) for feature in variant.min_isa)
    ]
    if not found:
        raise PublishError(
            f"{index} has no variant this CPU runs with {project}: "
            f"{sorted(v.name for v in variants)}",
            hint=NO_VARIANT_HINT,
        )
    return found


def served_wheels(
    page_url: str, project: str, *, labelled: bool = False, hint: str = "check --index"
) -> Wheels:
    """The wheels of `project` a project page lists by valid names (the rest skipped)."""
    try:
        files = project_files(page_url)
    except OSError as exc:  # unreachable, or not a Simple API page
        raise PublishError(
            f"cannot read {printable(page_url)}: {printable(str(exc))}", hint=hint
        ) from exc
    return wheel_files(files, project, labelled=labelled, page_url=page_url)


def candidates(
    simple_url: str, project: str, min_isa: tuple[str, ...] | None = None, arch: str | None = None
) -> tuple[list[Candidate], Wheels]:
    """The wheels on one simple index as candidates, and what was read (skipped names too)."""
    page_url = f"{simple_url.rstrip('/')}/{canonicalize_name(project)}/"
    wheels = served_wheels(page_url, project)
    found = []
    for file in wheels.files:
        version = version_of(file.filename)
        local = (version.local or "").split(".")
        variant = local[1] if local[0] == "cpu" and len(local) > 1 else "portable"
        found.append(
            Candidate(
                filename=file.filename,
                url=file.url,
                version=version,
                variant=variant,
                min_isa=min_isa if min_isa is not None else target_min_isa(variant, arch) or (),
                simple_url=simple_url,
                metadata_url=file.url + ".metadata" if file.has_metadata else None,
            )
        )
    return found, wheels


def supported_tags(python: Path) -> frozenset[Tag]:
    """The wheel tags `python` installs (asked of it, with this toolkit's packaging)."""
    if Path(python) == Path(sys.executable):
        return frozenset(sys_tags())
    packaging_parent = Path(packaging.__file__).resolve().parent.parent
    output = run.capture([python, "-c", TAGS_OF, packaging_parent], timeout=120)
    return frozenset(t for line in output.stdout.split() for t in parse_tag(line))


def choose(
    found: Sequence[Candidate], host_isa: Mapping[str, bool], version: str | None
) -> Candidate:
    """The newest release; within it the most specific build this CPU runs."""
    wanted = [
        c
        for c in found
        if version is None or c.version.public == version or str(c.version) == version
    ]
    runnable = [c for c in wanted if all(host_isa.get(f) for f in c.min_isa)]
    if not runnable:
        raise PublishError(
            f"no wheel on the index runs on this CPU (of {sorted(c.filename for c in wanted)})",
            hint=NO_VARIANT_HINT,
        )
    return max(runnable, key=lambda c: (Version(c.version.public), len(c.min_isa), c.filename))


def candidate_requirements(candidate: Candidate) -> list[str]:
    """The wheel's Requires-Dist: from its core metadata file (PEP 658), else from the wheel."""
    try:
        if candidate.metadata_url is None:  # pypiserver serves no metadata files: read the wheel
            with tempfile.TemporaryDirectory() as folder:
                wheel = Path(folder) / candidate.filename  # a checked name: no '/' in it
                wheel.write_bytes(fetch(candidate.url))
                return requires_dist(wheel)
        return metadata_requirements(fetch(candidate.metadata_url).decode())
    except (DataFileError, UnicodeDecodeError) as exc:
        why = exc.message if isinstance(exc, DataFileError) else f"not UTF-8 ({exc.reason})"
        raise PublishError(
            f"the index serves {candidate.filename} with core metadata that cannot be read: "
            f"{printable(why)}",
            hint="publish the wheel again (nox -s publish), or check the index server",
        ) from exc


def plan_install(
    index: str,
    host_isa: Mapping[str, bool],
    *,
    project: str = "vllm",
    version: str | None = None,
    python: Path = Path(sys.executable),
    public_index: str = PYPI_SIMPLE,
    sources: PipSources = NO_SOURCES,
    arch: str = platform.machine(),
) -> InstallPlan:
    tags = supported_tags(python)
    listed: list[Candidate] = []
    skipped_names: list[tuple[str, str]] = []
    for simple, min_isa in runnable_indexes(index, host_isa, project):
        mine, wheels = candidates(simple, project, min_isa, arch)
        listed += mine
        skipped_names += wheels.skipped
    skipped = Wheels(files=(), skipped=tuple(skipped_names))
    if not listed and skipped.skipped:
        raise nothing_left(project, index, skipped)
    found = [c for c in listed if tags_of(c.filename) & tags]
    if listed and not found:
        takes = sorted({t.interpreter for t in tags if t.interpreter.startswith("cp")})
        raise PublishError(
            f"no wheel on the index installs into {python} ({', '.join(takes)}): the Python "
            f"tags do not match, whatever the CPU: {sorted(c.filename for c in listed)}",
            hint="build a wheel for that Python (`build-wheel --python X.Y`), or install into "
            "a matching one (--python)",
        )
    chosen = choose(found, host_isa, version)
    deps = plan_requirements(candidate_requirements(chosen))
    pip = (str(python), "-m", "pip", "install")
    commands, notes = [], list(skipped.warnings())
    if deps.install:
        torch = next((r for r in deps.install if r.startswith("torch==")), None)
        if torch and not sources.torch_index_reachable and not sources.find_links:
            notes.append(
                f"{torch} is not on PyPI and {sources.torch_index or 'no PyTorch index'} is "
                "unreachable: it must come from pip's own configuration (or give --find-links)"
            )
        public = ("--index-url", public_index, *sources.args(torch=bool(torch)))
        commands.append((*pip, *public, *deps.install))
    internal = ("--index-url", chosen.simple_url, "--no-deps", f"{project}=={chosen.version}")
    commands.append((*pip, *internal))
    return InstallPlan(chosen=chosen, deps=deps, commands=tuple(commands), notes=tuple(notes))


def plan_uv_install(
    index: str,
    host_isa: Mapping[str, bool],
    *,
    uv: str,
    project: str = "vllm",
    version: str | None = None,
    python: Path = Path(sys.executable),
    public_index: str = PYPI_SIMPLE,
    sources: PipSources = NO_SOURCES,
) -> InstallPlan:
    """uv's commands for the wheel-variants index. uv itself picks the variant by the CPU's
    x86-64 level; the plan says which one it should pick here."""
    simple = urllib.parse.urljoin(index.rstrip("/") + "/", f"{wheel_variants.FOLDER}/simple/")
    page = f"{simple}{canonicalize_name(project)}/"
    hint = "publish with `publish --wheel-variants`, or give the index root with --index"
    wheels = served_wheels(page, project, labelled=True, hint=hint)
    if not wheels.files and wheels.skipped:
        raise nothing_left(project, page, wheels)
    releases = sorted({version_of(f.filename) for f in wheels.files})
    wanted = [v for v in releases if version is None or version in (v.public, str(v))]
    if not wanted:
        raise PublishError(f"{page} has no {project} {version or 'release'} ({releases})")
    tags = supported_tags(python)
    mine = [f for f in wheels.files if version_of(f.filename) == wanted[-1]]
    if not any(tags_of(f.filename) & tags for f in mine):
        raise PublishError(
            f"{page} has no {project} {wanted[-1]} that installs into {python}",
            hint="publish wheels built for that Python with `publish --wheel-variants`",
        )
    level = wheel_variants.host_level(host_isa)
    expected = _uv_pick([f for f in mine if tags_of(f.filename) & tags], level)
    if expected is None:
        raise PublishError(
            f"{page}: no {project} {wanted[-1]} runs on this CPU (x86-64 level "
            f"{level or 'below v3'}) and there is no non-variant fallback (no portable build)",
            hint=NO_VARIANT_HINT,
        )
    label = variant_label(expected.filename)
    expected_level = wheel_variants.level_of_label(label)
    chosen = Candidate(
        filename=expected.filename,
        url=expected.url,
        version=wanted[-1],
        variant=label or "null (the non-variant fallback)",
        min_isa=tuple(sorted(wheel_variants.LEVELS[expected_level])) if expected_level else (),
        metadata_url=expected.url + ".metadata" if expected.has_metadata else None,
        simple_url=simple,
    )
    deps = plan_requirements(candidate_requirements(chosen))
    install = (uv, "pip", "install", "--python", str(python))
    commands = []
    if deps.install:
        torch = next((r for r in deps.install if r.startswith("torch==")), None)
        commands.append(
            (*install, "--index-url", public_index, *sources.args(torch=bool(torch)), *deps.install)
        )
    internal = ("--preview-features", "wheel-variants", "--index-url", simple, "--no-deps")
    commands.append((*install, *internal, f"{project}=={wanted[-1]}"))
    notes = [
        *wheels.warnings(),
        f"uv picks by this CPU's x86-64 level ({level or 'below v3'}): expect {expected.filename}",
    ]
    return InstallPlan(chosen=chosen, deps=deps, commands=tuple(commands), notes=tuple(notes))


def _uv_pick(files: Sequence[IndexFile], level: str | None) -> IndexFile | None:
    """The file uv takes on a CPU of x86-64 `level`: the highest level variant it runs, else
    the non-variant fallback; None when there is neither."""
    order = list(wheel_variants.LEVELS)
    top = order.index(level) if level else -1

    def rank(file: IndexFile) -> int:
        label = variant_label(file.filename)
        found = wheel_variants.level_of_label(label)
        return -1 if label is None else order.index(found) if found else len(order)

    return max((f for f in files if rank(f) <= top), key=rank, default=None)
