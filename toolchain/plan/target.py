"""Choosing the ISA target of a build from the recipe's era and the host's features."""

from __future__ import annotations

from collections.abc import Mapping

from toolchain.errors import PlanError
from toolchain.plan.recipes import Recipe
from toolchain.targets import IsaModel, Target


def _blocker(target: Target, isa: Mapping[str, bool], recipe: Recipe) -> str | None:
    """Why upstream's cmake would not build exactly this target on this host, or None."""
    listed = [feature for feature in target.host_must_lack if isa.get(feature)]
    if listed:
        them = "them" if len(listed) > 1 else "it"
        return (
            f"vLLM {recipe.vllm}'s cmake turns on {', '.join(listed)} whenever the build "
            f"host's /proc/cpuinfo lists {them}, and this host does; no switch turns "
            f"{them} off"
        )
    missing = [feature for feature in target.host_must_have if not isa.get(feature)]
    if missing:
        return (
            f"vLLM {recipe.vllm}'s cmake takes {', '.join(missing)} only from the build "
            f"host's /proc/cpuinfo, and this host lacks it"
        )
    return None


def runs_on(target: Target, isa: Mapping[str, bool]) -> list[str]:
    """Features the host lacks to run a wheel of this target (empty: it runs here)."""
    return [feature for feature in target.min_isa if not isa.get(feature)]


def target_arch(recipe: Recipe, described: str, wanted: str | None, arch: str | None = None) -> str:
    """The host machine's architecture: --arch; else the one whose targets name --target (the
    Arm targets need no --arch), else the architecture of the machine described (this one, or
    --cpuinfo)."""
    if arch is not None:
        if arch not in recipe.isa_models:
            raise PlanError(f"vLLM {recipe.vllm} has no CPU build for {arch} (its recipe's "
                            f"[isa_model] names {', '.join(recipe.isa_models)})")  # fmt: skip
        return arch
    model = recipe.isa_models.get(described)
    if wanted is None or (model is not None and wanted in model.targets):
        return described
    owners = [arch for arch, model in recipe.isa_models.items() if wanted in model.targets]
    return owners[0] if len(owners) == 1 else described


def choose_target(
    recipe: Recipe, arch: str, isa: Mapping[str, bool], wanted: str | None, *, cross: bool = False
) -> Target:
    """The target to build; a cross build's cmake takes no feature from the build machine, so
    what upstream's cmake would read from its /proc/cpuinfo blocks nothing there."""
    model = recipe.isa_models[arch]
    if wanted is None:
        return _best_target(recipe, model, isa, cross=cross)
    if wanted not in model.targets:
        other = [m.arch for m in recipe.isa_models.values() if wanted in m.targets]
        where = f"; '{wanted}' is a target for {other[0]}" if other else ""
        raise PlanError(
            f"vLLM {recipe.vllm} on {arch} ({model.summary}) builds the targets "
            f"{', '.join(model.targets)}; not '{wanted}'{where}",
            hint=f"use --target {' or --target '.join(model.targets)}",
        )
    target = model.targets[wanted]
    blocker = None if cross else _blocker(target, isa, recipe)
    if blocker:
        raise PlanError(
            f"cannot build target {wanted} here: {blocker}",
            hint="build on a host that matches the target, or pick another --target",
        )
    return target


def _best_target(
    recipe: Recipe, model: IsaModel, isa: Mapping[str, bool], *, cross: bool
) -> Target:
    """The era's default target (one wheel for a mixed fleet), else the last (richest) target
    the host can both build exactly and run. With no CPU of the architecture described (an
    x86 machine asked for --arch aarch64), the default, which no CPU needs to choose."""
    default = model.targets.get(model.default_target or "")
    if default is not None and not isa:
        return default
    fitting = [
        t
        for t in model.targets.values()
        if not runs_on(t, isa) and (cross or not _blocker(t, isa, recipe))
    ]
    if not fitting:
        first = next(iter(model.targets.values()))
        raise PlanError(
            f"this CPU cannot run any vLLM {recipe.vllm} CPU wheel: it lacks "
            f"{', '.join(runs_on(first, isa))}",
            hint=f"build for other CPUs with --target {' or --target '.join(model.targets)} "
            "(`plan --cpuinfo FILE` plans for a machine from its saved /proc/cpuinfo)",
        )
    return default if default in fitting else fitting[-1]
