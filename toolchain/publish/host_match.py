"""Which of an index's wheels a host takes: its Python's wheel tags, its CPU's features."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import packaging
from packaging.markers import default_environment
from packaging.tags import Tag, parse_tag, sys_tags
from packaging.version import Version

from toolchain.errors import PublishError, UsageError
from toolchain.publish import wheel_variants
from toolchain.publish.install_index import NO_VARIANT_HINT, Candidate
from toolchain.publish.served import printable, tags_of, variant_label
from toolchain.targets import picked_tier, tier_needs
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.util.simple_api import IndexFile

# Run by the target Python with this toolkit's (pure-Python) packaging on its path: a venv made
# for uv has no pip to ask.
FACTS_OF = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from packaging.markers import default_environment; from packaging.tags import sys_tags; "
    "print(json.dumps({'tags': [str(t) for t in sys_tags()], 'markers': default_environment()}))"
)


@dataclass(frozen=True, kw_only=True)
class PythonFacts:
    """What the Python a wheel goes into takes: wheel tags, and its requirement markers'
    environment (its platform_machine, python_version: not this toolkit's)."""

    python: Path
    tags: frozenset[Tag]
    markers: Mapping[str, str]

    @property
    def machine(self) -> str:
        return self.markers.get("platform_machine", "")


def python_facts(python: Path) -> PythonFacts:
    """The facts of `python` (asked of it, with this toolkit's packaging)."""
    if Path(python) == Path(sys.executable):
        return PythonFacts(
            python=python,
            tags=frozenset(sys_tags()),
            markers={k: str(v) for k, v in default_environment().items()},
        )
    packaging_parent = Path(packaging.__file__).resolve().parent.parent
    output = run.capture([python, "-c", FACTS_OF, packaging_parent], timeout=120)
    where = f"--python {python}'s answer"
    answer = parse_json(output.stdout, where=where, error=UsageError)
    try:
        tags = frozenset(t for line in answer["tags"] for t in parse_tag(line))
        markers = {str(key): str(value) for key, value in answer["markers"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON, not the facts
        raise UsageError(
            f"--python {python} did not say which wheels it takes: {printable(str(exc))}",
            hint="give a CPython 3.9+ interpreter",
        ) from exc
    return PythonFacts(python=python, tags=tags, markers=markers)


def installable(listed: Sequence[Candidate], tags: frozenset[Tag], python: Path) -> list[Candidate]:
    """The candidates `python` can install by their tags; an error when some are listed but
    none fits."""
    found = [c for c in listed if tags_of(c.filename) & tags]
    if listed and not found:
        takes = sorted({t.interpreter for t in tags if t.interpreter.startswith("cp")})
        raise PublishError(
            f"no wheel on the index installs into {python} ({', '.join(takes)}): the Python "
            f"tags do not match, whatever the CPU: {sorted(c.filename for c in listed)}",
            hint="build a wheel for that Python (`build-wheel --python X.Y`), or install into "
            "a matching one (--python)",
        )
    return found


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
    return max(runnable, key=lambda c: preference(c, host_isa))


def preference(candidate: Candidate, host_isa: Mapping[str, bool]) -> tuple[Version, int, int, str]:
    """How well a build suits this CPU, higher is better: its release; then how many features the
    code this CPU would run in it uses; then the leaner build (fewer kernel tiers: `avx2` before
    `portable`, which carries tiers this CPU cannot use); the file name only to break a tie the
    same way each time."""
    target = candidate.target
    tiers = max(len(target.kernel_tiers), 1) if target else 1  # no tiers: the era's one `_C`
    return (
        Version(candidate.version.public),
        len(code_needs(candidate, host_isa)),
        -tiers,
        candidate.filename,
    )


def code_needs(candidate: Candidate, host_isa: Mapping[str, bool]) -> tuple[str, ...]:
    """The features the code this CPU runs in the wheel was compiled for: the kernel tier vLLM
    loads here, for a wheel with tiers; else the wheel's own needs."""
    target = candidate.target
    if target is None or not target.kernel_tiers:
        return candidate.min_isa
    tier = picked_tier(target.arch, host_isa, target.kernel_tiers)
    return tier_needs(target.arch).get(tier or "", candidate.min_isa)


def uv_pick(files: Sequence[IndexFile], level: str | None) -> IndexFile | None:
    """The file uv takes on a CPU of x86-64 `level`: the highest level variant it runs, else
    the non-variant fallback; None when there is neither."""
    order = list(wheel_variants.LEVELS)
    top = order.index(level) if level else -1

    def rank(file: IndexFile) -> int:
        label = variant_label(file.filename)
        found = wheel_variants.level_of_label(label)
        return -1 if label is None else order.index(found) if found else len(order)

    return max((f for f in files if rank(f) <= top), key=rank, default=None)
