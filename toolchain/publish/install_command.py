"""The pip commands that install the right vLLM wheel for this machine from an internal index.

The internal package comes only from the internal index, with `--index-url` (an
`--extra-index-url` would let a public package of the same name win: dependency confusion). Its
public requirements are a separate pip run against the public index, with the PyTorch CPU index or
local wheel folders for the `torch==X+cpu` pin. On an index with several `+cpu.TARGET` builds of
one release, the exact version this CPU runs is pinned, since pip would take the highest label.
"""

from __future__ import annotations

import dataclasses
import platform
import shlex
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import packaging
from packaging.tags import Tag, parse_tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from toolchain.errors import PublishError
from toolchain.publish import wheel_variants
from toolchain.publish.index import target_min_isa
from toolchain.runtime_deps import PipSources, RuntimePlan, plan_requirements
from toolchain.settings import PYPI_SIMPLE
from toolchain.util import run
from toolchain.util.datafile import parse_json
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
        return "\n".join(lines)


def fetch(url: str) -> bytes:
    """The body at `url`; PublishError when the index cannot be read."""
    try:
        return read_url(url)[0]
    except OSError as exc:
        raise PublishError(f"cannot read {url}: {exc}", hint="check --index") from exc


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
    try:
        variants: dict[str, Any] = parse_json(
            body, where=f"{root}variants.json", error=PublishError
        )["variants"]
        found: list[tuple[str, tuple[str, ...] | None]] = [
            (urllib.parse.urljoin(root, info["simple"]), tuple(info["min_isa"]))
            for info in variants.values()
            if canonicalize_name(project) in info["projects"]
            and all(host_isa.get(feature) for feature in info["min_isa"])
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PublishError(
            f"{root}variants.json is malformed ({exc!r}): not as `publish` writes it",
            hint="publish the index again (nox -s publish), or give the variant's simple/ URL",
        ) from exc
    if not found:
        raise PublishError(
            f"{index} has no variant this CPU runs with {project}: {sorted(variants)}",
            hint=NO_VARIANT_HINT,
        )
    return found


def candidates(
    simple_url: str, project: str, min_isa: tuple[str, ...] | None = None, arch: str | None = None
) -> list[Candidate]:
    page_url = f"{simple_url.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        files = project_files(page_url)
    except OSError as exc:
        raise PublishError(f"cannot read {page_url}: {exc}", hint="check --index") from exc
    found = []
    for file in files:
        if not file.filename.endswith(".whl"):
            continue
        version = Version(str(parse_wheel_filename(file.filename)[1]))
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
    return found


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
    if candidate.metadata_url is None:  # pypiserver serves no metadata files: read the wheel
        with tempfile.TemporaryDirectory() as folder:
            wheel = Path(folder) / candidate.filename
            wheel.write_bytes(fetch(candidate.url))
            return requires_dist(wheel)
    return metadata_requirements(fetch(candidate.metadata_url).decode())


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
    listed = [
        candidate
        for simple, min_isa in runnable_indexes(index, host_isa, project)
        for candidate in candidates(simple, project, min_isa, arch)
    ]
    found = [c for c in listed if parse_wheel_filename(c.filename)[3] & tags]
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
    commands, notes = [], []
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
    try:
        files = [f for f in project_files(page) if f.filename.endswith(".whl")]
    except OSError as exc:
        raise PublishError(
            f"cannot read {page}: {exc}",
            hint="publish with `publish --wheel-variants`, or give the index root with --index",
        ) from exc
    releases = sorted({_version(f.filename) for f in files})
    wanted = [v for v in releases if version is None or version in (v.public, str(v))]
    if not wanted:
        raise PublishError(f"{page} has no {project} {version or 'release'} ({releases})")
    tags = supported_tags(python)
    mine = [f for f in files if _version(f.filename) == wanted[-1] and _tags(f.filename) & tags]
    fallback = next((f for f in mine if _label(f.filename) is None), None)
    if fallback is None:
        raise PublishError(
            f"{page} has no non-variant {project} {wanted[-1]} that installs into {python}",
            hint="publish wheels built for that Python with `publish --wheel-variants`",
        )
    level = wheel_variants.host_level(host_isa)
    order = list(wheel_variants.LEVELS)
    top = order.index(level) if level else -1

    def rank(file: IndexFile) -> int:
        found = wheel_variants.level_of_label(_label(file.filename))
        return order.index(found) if found else top + 1

    fitting = [f for f in mine if rank(f) <= top]
    expected = max(fitting, key=rank, default=fallback)
    expected_level = wheel_variants.level_of_label(_label(expected.filename))
    chosen = Candidate(
        filename=expected.filename,
        url=expected.url,
        version=wanted[-1],
        variant=_label(expected.filename) or "null (the non-variant fallback)",
        min_isa=tuple(sorted(wheel_variants.LEVELS[expected_level])) if expected_level else (),
        metadata_url=fallback.url + ".metadata" if fallback.has_metadata else None,
        simple_url=simple,
    )
    deps = plan_requirements(candidate_requirements(dataclasses.replace(chosen, url=fallback.url)))
    install = (uv, "pip", "install", "--python", str(python))
    commands = []
    if deps.install:
        torch = next((r for r in deps.install if r.startswith("torch==")), None)
        commands.append(
            (*install, "--index-url", public_index, *sources.args(torch=bool(torch)), *deps.install)
        )
    internal = ("--preview-features", "wheel-variants", "--index-url", simple, "--no-deps")
    commands.append((*install, *internal, f"{project}=={wanted[-1]}"))
    note = (
        f"uv picks by this CPU's x86-64 level ({level or 'below v3'}): expect {expected.filename}"
    )
    return InstallPlan(chosen=chosen, deps=deps, commands=tuple(commands), notes=(note,))


def _label(filename: str) -> str | None:
    """The variant label of a wheel file name (PEP 825: after the platform tag), or None."""
    parts = filename.removesuffix(".whl").split("-")
    has_build = len(parts) > 2 and parts[2][:1].isdigit()
    return parts[-1] if len(parts) == (7 if has_build else 6) else None


def _plain(filename: str) -> str:
    """The file name without its variant label: what parsers that predate PEP 825 read."""
    label = _label(filename)
    return filename.removesuffix(f"-{label}.whl") + ".whl" if label else filename


def _version(filename: str) -> Version:
    return Version(str(parse_wheel_filename(_plain(filename))[1]))


def _tags(filename: str) -> frozenset[Tag]:
    return frozenset(parse_wheel_filename(_plain(filename))[3])
