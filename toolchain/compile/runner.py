"""Execute a BuildPlan: one registry maps each of the plan's steps to the code that runs it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.compile.compilation import CompileStats
from toolchain.detect.host import Host
from toolchain.errors import BuildError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import BuildPlan
from toolchain.util.report import reporter


@dataclass
class BuildFacts:
    """What the steps learn while they run; the manifest reads them."""

    cxx_version: str | None = None
    torch: str | None = None
    build_tools: dict[str, str | None] = field(default_factory=dict)
    compile: CompileStats | None = None
    built_wheel: Path | None = None
    repaired_wheel: Path | None = None
    dropped: list[str] = field(default_factory=list)
    delivered: Path | None = None
    debug_archive: Path | None = None  # the libraries' debug info, split out of the wheel
    cache: dict[str, Any] | None = None  # the shared compile cache: where, used, hits, misses
    cross: dict[str, Any] | None = None  # a cross build: compiler and sysroot as provisioned
    target_torch: dict[str, Any] | None = None  # a cross build: the torch wheel it built against
    precompiled_headers: tuple[str, ...] = ()  # the libraries the configure said it precompiled
    # their units that compile torch's headers themselves ("_C/csrc/cpu/utils.cpp"), and why
    own_torch_headers: dict[str, str] = field(default_factory=dict)
    lean_torch_headers: tuple[str, ...] = ()  # those it said got the lean <torch/all.h>
    opt_level: str | None = None  # GCC's level of vLLM's libraries, as the configure said

    @property
    def cache_used(self) -> bool:
        """The shared compile cache started and this build compiles through it."""
        return self.cache is not None and bool(self.cache["used"])


@dataclass
class BuildRun:
    plan: BuildPlan
    host: Host
    options: BuildOptions = field(default_factory=BuildOptions)
    durations: dict[str, float] = field(default_factory=dict)
    facts: BuildFacts = field(default_factory=BuildFacts)
    started: float = field(default_factory=time.monotonic)

    @property
    def log(self) -> Path:
        return self.plan.paths.log

    def compile_facts(self) -> dict[str, Any] | None:
        stats = self.facts.compile
        if stats is None:
            return None
        return {
            "steps": stats.steps_total,
            "peak_rss_bytes": stats.peak_rss_bytes,
            "min_available_bytes": stats.min_available_bytes,
            "pauses": stats.pauses,
            "seconds": round(stats.seconds, 1),
            "cpu_seconds": round(stats.cpu_seconds, 1),
            "unit_memory": stats.units.record(),
        }


StepFunction = Callable[[BuildRun], None]


def check_registry(plan: BuildPlan, registry: dict[str, StepFunction]) -> None:
    """Every step the plan names has code; a misspelled step is an error, never a skip."""
    unknown = [step.name for step in plan.steps if step.name not in registry]
    if unknown:
        raise BuildError(
            f"the plan names steps this toolkit cannot run: {', '.join(unknown)}",
            hint="a toolkit bug: report it with `plan --json`",
        )


def run_steps(build: BuildRun, registry: dict[str, StepFunction]) -> Path:
    """Run every step of the plan, in order; returns the delivered wheel."""
    plan = build.plan
    check_registry(plan, registry)
    plan.paths.build_dir.mkdir(parents=True, exist_ok=True)
    reporter.line(f"building vLLM {plan.vllm_version} ({plan.wheel_version}); log: {build.log}")
    for warning in plan.warnings:
        reporter.warning(warning)
    for step in plan.steps:
        with reporter.step(step.name, step.summary) as elapsed:
            registry[step.name](build)
        build.durations[step.name] = elapsed.seconds
    if build.facts.delivered is None:
        raise BuildError("the plan ended without delivering a wheel")
    return build.facts.delivered
