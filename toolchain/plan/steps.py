"""The plan's steps in the order build-wheel runs them, each with its one-line summary."""

from __future__ import annotations

from toolchain.options import BuildOptions
from toolchain.plan.buildplan import Compiler, Dependency, Paths, Step, TorchPin
from toolchain.plan.cross import CrossPlan
from toolchain.plan.jobs import JobSizing
from toolchain.plan.recipes import Patch, Recipe


def build_steps(
    recipe: Recipe,
    options: BuildOptions,
    arch: str,
    compiler: Compiler,
    compiler_steps: list[Step],
    third_party: tuple[Dependency, ...],
    torch: TorchPin,
    paths: Paths,
    jobs: JobSizing,
    patches: tuple[Patch, ...],
    cross: CrossPlan | None,
) -> tuple[Step, ...]:
    deps = ", ".join(f"{d.name} {d.ref}" for d in third_party) or "nothing"
    where = f"from {options.sources}" if options.sources else "(cmake downloads them)"
    return (
        Step(name="fetch-source", summary=_source_summary(recipe, options)),
        *patch_steps(patches, options),
        Step(name="third-party-sources", summary=f"check and unpack {deps} {where}"),
        *compiler_steps,
        Step(
            name="check-toolchain",
            summary=f"{compiler.cxx} >= {recipe.gxx_min.get(arch, 'any')}"
            f", cmake >= {recipe.cmake_min}, ninja, numa.h"
            + (f" in {cross.sysroot}" if cross else ""),
        ),
        *venv_steps(recipe, torch, paths),
        *(
            [
                Step(
                    name="start-cache",
                    summary=f"install {options.cache.requirement} into the venv, start it "
                    f"with the {options.cache.backend} cache {options.cache.where}"
                    + (
                        f", compiling on the build servers of {options.dist.url}"
                        if options.dist
                        else ""
                    )
                    + "; if that fails, warn and compile without it",
                )
            ]
            if options.cache
            else []
        ),
        *([_target_torch_step(cross)] if cross else []),
        Step(
            name="compile",
            summary=f"pip wheel --no-build-isolation with {jobs.compile_summary()}"
            f", log at {paths.log}",
        ),
        Step(
            name="repair",
            summary="auditwheel repair, torch libraries excluded; embed manifest"
            + (f" (auditwheel told the machine is {cross.host_machine})" if cross else ""),
        ),
        Step(name="deliver", summary=f"move the wheel and its manifest into {paths.wheel_dir}"),
    )


def venv_steps(recipe: Recipe, torch: TorchPin, paths: Paths) -> list[Step]:
    return [
        Step(name="create-venv", summary=f"a fresh venv at {paths.venv}"),
        Step(
            name="install-build-requirements",
            summary=f"{torch.requirement} from {torch.index_url}, then "
            + " ".join(recipe.build_requires),
        ),
    ]


def _target_torch_step(cross: CrossPlan) -> Step:
    return Step(
        name="target-torch",
        summary=f"pip download {cross.torch_requirement} for {cross.torch_platform} "
        f"(else {cross.torch_fallback}), unpack its CPU view at {cross.torch_view}; write "
        f"{cross.toolchain_file.name} and {cross.target_python.name}",
    )


def patch_steps(patches: tuple[Patch, ...], options: BuildOptions) -> list[Step]:
    if not patches or options.source_dir:
        return []
    names = ", ".join(p.file.name for p in patches)
    return [Step(name="apply-patches", summary=f"patch -p1 the unpacked source with {names}")]


def _source_summary(recipe: Recipe, options: BuildOptions) -> str:
    if options.source_dir:
        return f"use the source tree {options.source_dir} (no hash to check)"
    return f"download {recipe.sdist} from the package index, check sha256 {recipe.sha256[:12]}…"
