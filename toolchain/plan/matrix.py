"""A CI build matrix: vLLM versions x targets x Pythons, one cell a build-wheel command.

Each cell names what its build host must have (and lack): a target of a pre-0.17 recipe can only
be built exactly on a CPU of its own class (upstream's cmake reads the build host's
/proc/cpuinfo), so the CI must route the cell to a runner of that class.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from toolchain.errors import PlanError, UsageError
from toolchain.plan.recipes import Recipe

PYTHON_VERSION = re.compile(r"\d+\.\d+")  # what build-wheel --python takes


@dataclass(frozen=True, kw_only=True)
class Cell:
    vllm: str
    target: str
    python: str
    arch: str
    must_have: tuple[str, ...]
    must_lack: tuple[str, ...]
    command: str

    @property
    def name(self) -> str:
        return f"vllm-{self.vllm}-{self.arch}-{self.target}-py{self.python}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vllm": self.vllm,
            "target": self.target,
            "python": self.python,
            "arch": self.arch,
            "build_host_must_have": list(self.must_have),
            "build_host_must_lack": list(self.must_lack),
            "command": self.command,
        }


def build_matrix(
    recipes: Sequence[Recipe],
    *,
    arch: str,
    targets: Sequence[str] = (),
    pythons: Sequence[str] = (),
    cache: bool = False,
) -> list[Cell]:
    """Every (recipe, target, Python) cell; targets and Pythons default to each recipe's own
    (its era's default target on `arch`, else all its targets; its preferred Python).
    A build asked for twice (a repeated flag, two recipes of one release) is one cell, where it
    first appears: two CI jobs would race to publish the same wheel."""
    bad = [python for python in pythons if not PYTHON_VERSION.fullmatch(python)]
    if bad:
        raise UsageError(
            f"--python {bad[0]}: give a Python as MAJOR.MINOR, as build-wheel takes it",
            hint="e.g. --python 3.12",
        )
    cells: dict[tuple[Version, str, str], Cell] = {}
    for recipe in recipes:
        for python, target in _wanted(recipe, arch, targets, pythons):
            if (recipe.vllm, target, python) not in cells:
                cells[recipe.vllm, target, python] = _cell(recipe, arch, target, python, cache)
    return list(cells.values())


def _wanted(
    recipe: Recipe, arch: str, targets: Sequence[str], pythons: Sequence[str]
) -> list[tuple[str, str]]:
    """(Python, target) pairs of one recipe, refusing those it cannot build."""
    model = recipe.isa_models[arch]
    # an era with a default target (one wheel for a mixed fleet) builds that one unless asked
    wanted = list(targets) or (
        [model.default_target] if model.default_target else list(model.targets)
    )
    unknown = [t for t in wanted if t not in model.targets]
    if unknown and targets:
        raise PlanError(
            f"vLLM {recipe.vllm} on {arch} builds {', '.join(model.targets)}; "
            f"not {', '.join(unknown)}",
            hint="leave --target out for every target of each version",
        )
    chosen = list(pythons) or [recipe.python_preferred]
    for python in chosen:
        if not recipe.python_requires.contains(python):
            raise PlanError(
                f"vLLM {recipe.vllm} needs Python {recipe.python_requires}, not {python}"
            )
    return [(python, name) for python in chosen for name in wanted]


def _cell(recipe: Recipe, arch: str, name: str, python: str, cache: bool) -> Cell:
    target = recipe.isa_models[arch].targets[name]
    argv = ["nox", "-s", "build-wheel", "--", "--vllm", str(recipe.vllm)]
    argv += ["--target", name, "--python", python]
    if any(name in m.targets for a, m in recipe.isa_models.items() if a != arch):
        argv += ["--arch", arch]  # `portable` is a target of both architectures
    return Cell(
        vllm=str(recipe.vllm),
        target=name,
        python=python,
        arch=arch,
        must_have=tuple(sorted({*target.host_must_have, *target.min_isa})),
        must_lack=target.host_must_lack,
        command=shlex.join(argv) + (' --cache "$VCB_CACHE"' if cache else ""),
    )
