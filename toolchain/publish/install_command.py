"""The pip or uv commands that install the right vLLM wheel for a machine from an internal index.

The internal package comes only from the internal index, with `--index-url` (an
`--extra-index-url` would let a public package of the same name win: dependency confusion). Its
public requirements are a separate pip run against the public index, with the PyTorch CPU index or
local wheel folders for the `torch==X+cpu` pin. On an index with several `+cpu.TARGET` builds of
one release, the exact version this CPU runs is pinned, since pip would take the highest label.
Reading the index is install_index's, matching the host host_match's; this module formats.
"""

from __future__ import annotations

import shlex
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from toolchain.errors import PublishError
from toolchain.publish import wheel_variants
from toolchain.publish.host_match import PythonFacts, choose, installable, python_facts, uv_pick
from toolchain.publish.install_index import (
    NO_VARIANT_HINT,
    Candidate,
    candidate_requirements,
    candidates,
    runnable_indexes,
    served_wheels,
)
from toolchain.publish.public_sources import PublicSources
from toolchain.publish.served import (
    Wheels,
    nothing_left,
    printable,
    tags_of,
    variant_label,
    version_of,
)
from toolchain.runtime_deps import PipSources, RuntimePlan, plan_requirements
from toolchain.targets import TargetCatalog
from toolchain.util.index_env import CREDENTIALS_NOTE, shown_command
from toolchain.util.pip_config import PipConfig

NO_SOURCES = PipSources()  # pip's own configuration only
NO_PIP_CONFIG = PipConfig()
X86_MACHINES = frozenset({"x86_64", "AMD64", "amd64"})


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


def plan_install(
    index: str,
    host_isa: Mapping[str, bool],
    *,
    project: str = "vllm",
    version: str | None = None,
    python: Path = Path(sys.executable),
    public_index: str | None = None,
    sources: PipSources = NO_SOURCES,
    catalog: TargetCatalog | None = None,
    pip_config: PipConfig = NO_PIP_CONFIG,
) -> InstallPlan:
    facts = python_facts(python)
    chosen, deps, warnings = per_isa_choice(index, host_isa, project, version, facts, catalog)
    pip = (str(python), "-m", "pip", "install")
    public = PublicSources(index_url=public_index, sources=sources, pip_config=pip_config)
    commands, notes = public.commands(pip, deps, reads_pip_config=True)
    internal = ("--index-url", chosen.simple_url, "--no-deps", f"{project}=={chosen.version}")
    commands.append((*pip, *internal))
    return InstallPlan(
        chosen=chosen, deps=deps, commands=tuple(commands), notes=(*warnings, *notes)
    )


def per_isa_choice(
    index: str,
    host_isa: Mapping[str, bool],
    project: str,
    version: str | None,
    facts: PythonFacts,
    catalog: TargetCatalog | None,
) -> tuple[Candidate, RuntimePlan, tuple[str, ...]]:
    """The wheel this CPU and Python take from the per-ISA index, its requirements for that
    Python (markers as there), and warnings about what was skipped."""
    listed: list[Candidate] = []
    skipped_names: list[tuple[str, str]] = []
    for simple, min_isa in runnable_indexes(index, host_isa, project):
        mine, wheels = candidates(simple, project, min_isa, catalog)
        listed += mine
        skipped_names += wheels.skipped
    skipped = Wheels(files=(), skipped=tuple(skipped_names))
    if not listed and skipped.skipped:
        raise nothing_left(project, index, skipped)
    chosen = choose(installable(listed, facts.tags, facts.python), host_isa, version)
    deps = plan_requirements(candidate_requirements(chosen), environment=facts.markers)
    return chosen, deps, skipped.warnings()


def plan_uv_install(
    index: str,
    host_isa: Mapping[str, bool],
    *,
    uv: str,
    project: str = "vllm",
    version: str | None = None,
    python: Path = Path(sys.executable),
    public_index: str | None = None,
    sources: PipSources = NO_SOURCES,
    pip_config: PipConfig = NO_PIP_CONFIG,
    catalog: TargetCatalog | None = None,
) -> InstallPlan:
    """uv's commands for the wheel-variants index. uv itself picks the variant by the CPU's
    x86-64 level; the plan says which one it should pick here. Off x86-64 uv picks no variant
    (its aarch64 provider knows only the architecture version): the per-ISA index, as for pip."""
    facts = python_facts(python)
    if facts.machine not in X86_MACHINES:
        chosen, deps, warnings = per_isa_choice(index, host_isa, project, version, facts, catalog)
        install = (uv, "pip", "install", "--python", str(python))
        public = PublicSources(index_url=public_index, sources=sources, pip_config=pip_config)
        commands, notes = public.commands(install, deps, reads_pip_config=False)
        pinned = f"{project}=={chosen.version}"
        commands.append((*install, "--index-url", chosen.simple_url, "--no-deps", pinned))
        why = f"uv chooses no {facts.machine} variant: the per-ISA index, chosen here"
        return InstallPlan(
            chosen=chosen, deps=deps, commands=tuple(commands), notes=(*warnings, *notes, why)
        )
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
    tags = facts.tags
    mine = [f for f in wheels.files if version_of(f.filename) == wanted[-1]]
    if not any(tags_of(f.filename) & tags for f in mine):
        raise PublishError(
            f"{page} has no {project} {wanted[-1]} that installs into {python}",
            hint="publish wheels built for that Python with `publish --wheel-variants`",
        )
    level = wheel_variants.host_level(host_isa)
    expected = uv_pick([f for f in mine if tags_of(f.filename) & tags], level)
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
    deps = plan_requirements(candidate_requirements(chosen), environment=facts.markers)
    install = (uv, "pip", "install", "--python", str(python))
    public = PublicSources(index_url=public_index, sources=sources, pip_config=pip_config)
    commands, public_notes = public.commands(install, deps, reads_pip_config=False)
    internal = ("--preview-features", "wheel-variants", "--index-url", simple, "--no-deps")
    commands.append((*install, *internal, f"{project}=={wanted[-1]}"))
    notes = [
        *wheels.warnings(),
        *public_notes,
        f"uv picks by this CPU's x86-64 level ({level or 'below v3'}): expect {expected.filename}",
    ]
    return InstallPlan(chosen=chosen, deps=deps, commands=tuple(commands), notes=tuple(notes))
