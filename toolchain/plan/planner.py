"""Plan, then execute: a pure function turns host, recipe and options into a frozen BuildPlan."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from packaging.version import Version

from toolchain.detect.host import Host
from toolchain.errors import PlanError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import BuildPlan, ExpectedCost, Paths, PythonChoice, TorchPin
from toolchain.plan.cache import cache_env, dist_plan
from toolchain.plan.compiler import choose_compiler, cross_compiler
from toolchain.plan.cross import TARGET_MACHINE_SWITCH, cross_env, plan_cross
from toolchain.plan.darwin import plan_darwin
from toolchain.plan.earlier import EarlierBuild, builds_like
from toolchain.plan.jobs import build_jobs
from toolchain.plan.recipes import Recipe
from toolchain.plan.sources import patch_warnings, plan_source, third_party_sources
from toolchain.plan.steps import build_steps
from toolchain.plan.switches import (
    NINJA_STATUS,
    arm_acl,
    cmake_args,
    kernel_env,
    onednn_prune,
    precompiled_libraries,
    require_switch,
)
from toolchain.plan.target import choose_target, runs_on, target_arch
from toolchain.settings import level_to_pass
from toolchain.targets import IsaModel, Target


def choose_python(recipe: Recipe, host: Host, wanted: str | None) -> tuple[str, str]:
    """(version, interpreter path) inside the recipe's range: asked for, preferred, else newest."""
    in_range = {
        v: path for v, path in host.pythons.items() if recipe.python_requires.contains(f"{v}.0")
    }
    if wanted is not None:
        if not recipe.python_requires.contains(f"{wanted}.0"):
            raise PlanError(
                f"vLLM {recipe.vllm} needs Python {recipe.python_requires}; "
                f"{wanted} is outside that range",
                hint=f"use --python with one of: {', '.join(in_range) or 'none here'}",
            )
        if wanted not in host.pythons:
            raise PlanError(
                f"python{wanted} is not on PATH",
                hint=f"install it, or use --python with one of: {', '.join(in_range)}",
            )
        return wanted, host.pythons[wanted]
    if recipe.python_preferred in in_range:
        return recipe.python_preferred, in_range[recipe.python_preferred]
    if not in_range:
        raise PlanError(
            f"vLLM {recipe.vllm} needs Python {recipe.python_requires}; found "
            f"{', '.join(host.pythons) or 'none'} on PATH",
            hint=f"install python{recipe.python_preferred}",
        )
    newest = max(in_range, key=Version)
    return newest, in_range[newest]


def plan_build(host: Host, recipe: Recipe, options: BuildOptions) -> BuildPlan:
    host.require_supported()
    if host.system == "Darwin":
        return plan_darwin(host, recipe, options)
    # the host machine: the wheel's
    arch = target_arch(recipe, host.arch, options.target, options.arch)
    cross = arch != host.build_arch
    # a CPU's features count only for the architecture it has
    isa = host.isa if host.arch == arch else {}
    target = choose_target(recipe, arch, isa, options.target, cross=cross)
    warnings: list[str] = []
    lacking = runs_on(target, isa)
    if lacking and isa:
        warnings.append(
            f"this host lacks {', '.join(lacking)}: it can build the {target.name} "
            "wheel but cannot import its kernels, so verify it on a machine that can"
        )
    elif cross and host.arch != arch:
        warnings.append(
            f"this {host.build_arch} machine cross-compiles the {arch} wheel and cannot import "
            f"it: verify it on an {arch} machine that has {', '.join(target.min_isa)}"
        )
    py_version, py_path = choose_python(recipe, host, options.python)
    dist = dist_plan(options, warnings)
    remote = dist.remote_cpus if dist else 0
    jobs = build_jobs(host, recipe, options, arch=arch, remote_cpus=remote)
    warnings += [jobs.warning] if jobs.warning else []
    wheel_version = target.wheel_version(recipe.vllm)
    build_dir = (
        options.work_dir
        / "builds"
        / (f"vllm-{recipe.vllm}-{arch}-{target.name}-cp{py_version.replace('.', '')}")
    )
    paths = Paths(
        work_dir=options.work_dir,
        build_dir=build_dir,
        venv=build_dir / "venv",
        src=build_dir / "src",
        deps=build_dir / "deps",
        log=build_dir / "build.log",
        wheel_dir=options.wheel_dir,
    )
    patches = tuple(patch for patch in recipe.patches if patch.applies_to(arch))
    cross_plan = (
        plan_cross(
            build_arch=host.build_arch,
            host_arch=arch,
            work_dir=options.work_dir,
            build_dir=build_dir,
            torch_pin=recipe.torch[arch],
            python_version=py_version,
        )
        if cross
        else None
    )
    if cross_plan is not None:
        require_switch(recipe, options, patches, TARGET_MACHINE_SWITCH, f"a cross build for {arch}")
        compiler, compiler_steps = cross_compiler(cross_plan, options)
    else:
        compiler, compiler_steps = choose_compiler(recipe, host, options)
    acl = arm_acl(recipe, arch, options, patches)
    third_party, deps_env, deps_warnings = third_party_sources(
        recipe, arch, options, paths.deps, acl
    )
    prune = onednn_prune(recipe, target, options.source_dir, warnings, patches, acl)
    precompiled = precompiled_libraries(target, arch, options, warnings)
    torch_headers = options.get("torch_headers", str)
    opt_level = options.get("opt_level", str)
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        **jobs.env(),
        "CMAKE_BUILD_TYPE": options.build_type,
        **target.env,
        **kernel_env(recipe, recipe.isa_models[arch], target, patches, options),
        **cmake_args(
            target,
            prune,
            jobs,
            paths.recipe_files,
            cross_plan,
            acl,
            precompiled,
            lean=torch_headers == "lean",
            opt_level=level_to_pass(options.build_type, opt_level),
        ),
        "CC": compiler.cc,
        "CXX": compiler.cxx,
        **(cross_env(cross_plan) if cross_plan else {}),
        "VLLM_VERSION_OVERRIDE": wheel_version,
        # The live progress line reads ninja's "[done/total]"; a user's own NINJA_STATUS would
        # silently hide it.
        "NINJA_STATUS": NINJA_STATUS,
        **deps_env,
        **cache_env(host, options, build_dir, warnings, bool(precompiled)),
    }
    pinned = recipe.torch[host.build_arch if cross else arch]  # the build venv's torch
    # Accepting a CUDA torch means accepting any build of the pinned version (PyPI's has no +cpu).
    torch = TorchPin(
        requirement=f"torch=={Version(pinned).public if options.allow_cuda_torch else pinned}",
        index_url=options.torch_index or recipe.torch_index,
        find_links=options.find_links,
    )
    planned = BuildPlan(
        vllm_version=str(recipe.vllm),
        recipe=str(recipe.path),
        arch=arch,
        build_arch=host.build_arch,
        cross=cross_plan,
        arm_acl=acl,
        target_isa=target.name,
        isa_model=recipe.isa_models[arch].name,
        min_isa=target.min_isa,
        target_note=_target_note(recipe.isa_models[arch], target, isa, options),
        kernel_tiers=target.kernel_tiers,
        onednn_isa=target.onednn_isa,
        onednn_prune=prune,
        precompiled_headers=precompiled,
        torch_headers=torch_headers,
        build_type=options.build_type,
        opt_level=opt_level,
        expected=None,  # below: what earlier builds like this plan cost
        wheel_version=wheel_version,
        python=PythonChoice(
            version=py_version, interpreter=py_path, requires=str(recipe.python_requires)
        ),
        torch=torch,
        build_requires=recipe.build_requires,
        compiler=compiler,
        source=plan_source(recipe, options),
        third_party=third_party,
        max_jobs=jobs.max_jobs,
        jobs=jobs,
        env=env,
        paths=paths,
        steps=build_steps(
            recipe,
            options,
            arch,
            compiler,
            compiler_steps,
            third_party,
            torch,
            paths,
            jobs,
            patches,
            cross_plan,
        ),
        dropped_requirements=recipe.drop_requirements,
        patches=patches,
        shared_cache=options.cache,
        dist=dist,
        cmake_min=recipe.cmake_min,
        warnings=tuple(warnings + deps_warnings + patch_warnings(patches, options)),
    )
    return dataclasses.replace(planned, expected=_expected_cost(builds_like(planned)))


def _target_note(
    model: IsaModel, target: Target, isa: Mapping[str, bool], options: BuildOptions
) -> str:
    """Why this target: asked for, or the era's default, and what else this host could build."""
    if options.target is not None:
        return f"target {target.name}: asked for"
    if model.default_target != target.name:
        return f"target {target.name}: the richest this host builds and runs"
    leaner = [t.name for t in model.targets.values() if t is not target and not runs_on(t, isa)]
    return f"target {target.name}: the default, one wheel for every CPU of a mixed fleet" + (
        f"; for CPUs like this one alone, --target {' or '.join(leaner)} compiles less"
        if leaner
        else ""
    )


def _expected_cost(builds: list[EarlierBuild]) -> ExpectedCost | None:
    """What the costliest earlier build like this one cost (plan/earlier.py), so the plan never
    promises too little."""
    seen = []
    for build in builds:
        cpu, wall = build.figure("compile", "cpu_seconds"), build.figure("compile", "seconds")
        if cpu is not None and wall is not None:
            seen.append(ExpectedCost(cpu_seconds=cpu, wall_seconds=wall, manifest=build.manifest))
    return max(seen, key=lambda e: e.cpu_seconds, default=None)
