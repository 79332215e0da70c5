"""What to install beside a vLLM CPU wheel, and what to leave out (and say so)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from toolchain.util.net import reachable
from toolchain.wheelfile import read_manifest, requires_dist

# PyPI's builds of these are CUDA builds on x86_64; beside a CPU torch they break
# `from vllm import LLM` and transformers. Only CPU builds of them may be installed.
CUDA_ON_PYPI = frozenset({"torchvision", "torchaudio", "torchcodec"})


PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True, kw_only=True)
class PipSources:
    """Where pip finds a `torch==X+cpu` pin: local wheel folders, and the PyTorch CPU index when
    it answers (an unreachable index would only make pip retry)."""

    find_links: tuple[Path, ...] = ()
    torch_index: str = ""

    @functools.cached_property
    def torch_index_reachable(self) -> bool:
        return bool(self.torch_index) and reachable(self.torch_index)

    def args(self, *, torch: bool = True) -> list[str]:
        """pip arguments: the folders, plus the torch index if `torch` is wanted and reachable."""
        found = [arg for link in self.find_links for arg in ("--find-links", str(link))]
        if torch and self.torch_index_reachable:
            found += ["--extra-index-url", self.torch_index]
        return found


@dataclass(frozen=True, kw_only=True)
class RuntimePlan:
    install: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (requirement, why)

    def left_out_by_reason(self) -> dict[str, list[str]]:
        """Names of what was left out, grouped by why."""
        grouped: dict[str, list[str]] = {}
        for line, why in self.left_out:
            try:
                name = Requirement(line).name
            except InvalidRequirement:
                name = line
            grouped.setdefault(why, []).append(name)
        return grouped

    def describe_left_out(self) -> str:
        return "; ".join(f"{', '.join(n)}: {why}" for why, n in self.left_out_by_reason().items())


def runtime_requirements(wheel: Path, environment: Mapping[str, str] | None = None) -> RuntimePlan:
    """The wheel's Requires-Dist for this environment, minus what cannot or must not install."""
    manifest = read_manifest(wheel) or {}
    torch_pin = (manifest.get("toolchain") or {}).get("torch")
    return plan_requirements(requires_dist(wheel), torch_pin, environment)


def plan_requirements(
    lines: Iterable[str], torch_pin: str | None = None, environment: Mapping[str, str] | None = None
) -> RuntimePlan:
    """Requires-Dist lines for this environment, torch pinned to the build's when known."""
    env: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    env.update({"extra": "", **(environment or {})})
    install: list[str] = [f"torch=={torch_pin}"] if torch_pin else []
    left_out: list[tuple[str, str]] = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            left_out.append((line, "not a valid requirement"))
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(env):
            continue
        name = canonicalize_name(requirement.name)
        if requirement.url:
            left_out.append((line, "a direct URL, which no offline install accepts"))
        elif name in CUDA_ON_PYPI:
            left_out.append(
                (line, "PyPI has only CUDA builds; install a CPU build by hand if a model needs it")
            )
        elif name == "torch" and torch_pin:
            continue  # pinned above to the exact build the wheel was compiled against
        else:
            requirement.marker = None
            install.append(str(requirement))
    return RuntimePlan(install=tuple(install), left_out=tuple(left_out))
