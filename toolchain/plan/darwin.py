"""macOS on Apple Silicon: the plan for a Mac, from that Mac's facts (its own or a saved dump's).

What vLLM's cmake/cpu_extension.cmake does there: Apple clang with `-Xpreprocessor -fopenmp` (the
kernel library finds libomp in torch at run time), no libnuma (VLLM_NUMA_DISABLED), no oneDNN and
no Arm Compute Library, and `-march` from the build Mac's sysctl (FEAT_BF16, FEAT_I8MM) with no
switch to change it: the Mac decides the target. Nothing compiles for macOS off a Mac.
"""

from __future__ import annotations

from packaging.version import Version

from toolchain.detect.host import Host
from toolchain.errors import PlanError, UnsupportedHostError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import (
    BuildPlan,
    Compiler,
    MacosPlan,
    Paths,
    PythonChoice,
    Step,
    TorchPin,
)
from toolchain.plan.jobs import JobSizing, build_jobs
from toolchain.plan.recipes import DarwinRecipe, Patch, Recipe
from toolchain.plan.sources import plan_source
from toolchain.plan.steps import patch_steps, venv_steps
from toolchain.plan.switches import NINJA_STATUS
from toolchain.plan.target import runs_on
from toolchain.settings import BUILD_TYPE_LEVEL, PYPI_SIMPLE
from toolchain.targets import IsaModel, Target
from toolchain.util.units import MIB

# Apple's clang from the Xcode Command Line Tools (a Homebrew clang may come first on PATH)
APPLE_CC, APPLE_CXX = "/usr/bin/clang", "/usr/bin/clang++"


def plan_darwin(host: Host, recipe: Recipe, options: BuildOptions) -> BuildPlan:
    darwin = _darwin_recipe(host, recipe)
    target = mac_target(recipe, darwin.isa_model, host.isa, options.target)
    warnings = _ignored(options)
    macos = _macos(host, recipe, darwin, target, warnings)
    python = _python(recipe, host, options)
    jobs = _jobs(host, recipe, options, warnings)
    wheel_version = target.wheel_version(recipe.vllm)
    cp = "cp" + python.version.replace(".", "")
    paths = _paths(options, f"vllm-{recipe.vllm}-macos-arm64-{target.name}-{cp}")
    torch = TorchPin(
        requirement=f"torch=={darwin.torch}",
        index_url=options.torch_index or PYPI_SIMPLE,
        find_links=options.find_links,
    )
    patches = tuple(p for p in recipe.patches if p.arch is None)  # arch patches are Linux's
    return BuildPlan(
        vllm_version=str(recipe.vllm),
        recipe=str(recipe.path),
        arch="arm64",
        build_arch=host.build_arch,
        cross=None,  # no cross build to macOS: build-wheel refuses a Darwin plan off a Mac
        arm_acl=None,
        target_isa=target.name,
        isa_model=darwin.isa_model.name,
        min_isa=target.min_isa,
        target_note=_target_note(recipe, darwin.isa_model, target, host, options),
        kernel_tiers=(),
        onednn_isa=None,
        onednn_prune=None,
        precompiled_headers=(),
        torch_headers="full",  # the lean header is not planned on a Mac yet
        build_type=options.build_type,
        opt_level=BUILD_TYPE_LEVEL[options.build_type],  # vllm-libraries.cmake is not passed
        expected=None,
        wheel_version=wheel_version,
        python=python,
        torch=torch,
        build_requires=recipe.build_requires,
        compiler=Compiler(
            cxx=APPLE_CXX,
            cc=APPLE_CC,
            version="checked on the Mac at build time",
            origin="Xcode Command Line Tools",
            minimum=darwin.clang_min,
        ),
        source=plan_source(recipe, options),
        third_party=(),
        max_jobs=jobs.max_jobs,
        jobs=jobs,
        env=_env(options, jobs, wheel_version, macos),
        paths=paths,
        steps=_steps(recipe, options, macos, torch, paths, jobs, patches),
        patches=patches,
        cmake_min=recipe.cmake_min,
        warnings=tuple(warnings),
        macos=macos,
    )


def _ignored(options: BuildOptions) -> list[str]:
    """Settings a macOS plan has no use for: said, not silently dropped."""
    named = {
        "--cxx / CXX (upstream's macOS build is Apple clang's)": options.cxx,
        "--cache and --dist-scheduler (no compile cache is planned on a Mac yet)": options.cache
        or options.dist,
        "--allow-cuda-torch (torch on macOS has no CUDA)": options.allow_cuda_torch,
        # these defaults are on: only a user's own choice is worth a word
        "--precompiled-headers (not planned on a Mac yet)": options.get("precompiled_headers", bool)
        and options.given("precompiled_headers"),
        "--torch-headers lean (not planned on a Mac yet: torch's own all.h)": options.get(
            "torch_headers", str
        )
        == "lean"
        and options.given("torch_headers"),
        "--opt-level (not planned on a Mac yet: the build type's own level)": options.given(
            "opt_level"
        ),
    }
    return [f"{what} is ignored for a macOS plan" for what, given in named.items() if given]


def _python(recipe: Recipe, host: Host, options: BuildOptions) -> PythonChoice:
    """--python or the recipe's preferred one; the Mac's own interpreter is found there."""
    version = options.python or recipe.python_preferred
    if not recipe.python_requires.contains(f"{version}.0"):
        raise PlanError(
            f"vLLM {recipe.vllm} needs Python {recipe.python_requires}; {version} is outside it",
            hint=f"use --python {recipe.python_preferred}",
        )
    return PythonChoice(
        version=version,
        interpreter=host.pythons.get(version, f"python{version}"),
        requires=str(recipe.python_requires),
    )


def _jobs(host: Host, recipe: Recipe, options: BuildOptions, warnings: list[str]) -> JobSizing:
    """Flat sizing: the recipe's per-unit model was measured on Linux, oneDNN included."""
    jobs = build_jobs(host, recipe, options, arch="arm64", measured=False)
    warnings += [jobs.warning] if jobs.warning else []
    warnings.append(
        f"memory per job is the recipe's {recipe.memory_per_job_bytes // MIB:,} MiB, measured "
        "with g++ on x86_64; Apple clang's peak on these kernels is not measured yet"
    )
    return jobs


def _paths(options: BuildOptions, name: str) -> Paths:
    build_dir = options.work_dir / "builds" / name
    return Paths(
        work_dir=options.work_dir,
        build_dir=build_dir,
        venv=build_dir / "venv",
        src=build_dir / "src",
        deps=build_dir / "deps",
        log=build_dir / "build.log",
        wheel_dir=options.wheel_dir,
    )


def _darwin_recipe(host: Host, recipe: Recipe) -> DarwinRecipe:
    if host.arch != "aarch64":
        raise UnsupportedHostError(
            f"the Mac described is {host.arch} ({host.cpu_model or 'unknown CPU'}): vLLM's CPU "
            "backend builds on macOS only for Apple Silicon (arm64)",
            hint="plan on an Apple Silicon Mac, or for a Linux machine with --cpuinfo",
        )
    if recipe.darwin is None:
        raise PlanError(
            f"the recipe of vLLM {recipe.vllm} has no [darwin] table: no macOS build is known "
            "for it",
            hint="use a recipe with one (recipes/README.md says what it holds)",
        )
    return recipe.darwin


def sysctl_features(model: IsaModel) -> list[str]:
    """The features upstream's macOS cmake asks the build Mac's sysctl for, in this model."""
    asked = {f for t in model.targets.values() for f in (*t.host_must_have, *t.host_must_lack)}
    return [f for f in ("bf16", "i8mm") if f in asked] + sorted(asked - {"bf16", "i8mm"})


def _fits(target: Target, isa: dict[str, bool]) -> bool:
    """Upstream's cmake makes exactly this target on a Mac with these features."""
    return (
        not runs_on(target, isa)
        and all(isa.get(feature) for feature in target.host_must_have)
        and not any(isa.get(feature) for feature in target.host_must_lack)
    )


def mac_target(recipe: Recipe, model: IsaModel, isa: dict[str, bool], wanted: str | None) -> Target:
    """The one target upstream's cmake builds on this Mac; --target may only name that one."""
    fitting = [t for t in model.targets.values() if _fits(t, isa)]
    if not fitting:
        first = next(iter(model.targets.values()))
        raise PlanError(
            f"vLLM {recipe.vllm} on macOS ({model.summary}) has no target for a Mac with "
            f"{' '.join(f for f, on in isa.items() if on) or 'no features'}; it needs "
            f"{', '.join(first.min_isa)}",
        )
    target = fitting[-1]
    if wanted is not None and wanted != target.name:
        if wanted not in model.targets:
            why = f"builds the targets {', '.join(model.targets)}; not '{wanted}'"
        else:
            why = (
                f"takes {' and '.join(sysctl_features(model))} from the build Mac's sysctl, "
                f"with no switch: this Mac builds {target.name}, not {wanted}"
            )
        raise PlanError(
            f"vLLM {recipe.vllm} on macOS {why}",
            hint="leave --target out, or plan on a Mac of the kind you want the wheel for",
        )
    return target


def _macos(
    host: Host, recipe: Recipe, darwin: DarwinRecipe, target: Target, warnings: list[str]
) -> MacosPlan:
    """The deployment target is the release's floor: the wheel then runs wherever its torch does,
    and its tag is known before the build (a build left alone takes the Mac's own version)."""
    build_macos = host.mac.macos_version if host.mac else None
    floor = Version(darwin.macos_min)
    if build_macos is None:
        warnings.append(
            f"the dump does not say which macOS the Mac runs (no kern.osproductversion; "
            f"`sysctl -a` has it): vLLM {recipe.vllm} needs macOS {darwin.macos_min} or newer"
        )
    elif Version(build_macos) < floor:
        raise PlanError(
            f"the Mac runs macOS {build_macos}; vLLM {recipe.vllm} on macOS needs "
            f"{darwin.macos_min} or newer (upstream's floor, and torch {darwin.torch}'s wheels)",
            hint=f"update the Mac to macOS {darwin.macos_min} or newer",
        )
    return MacosPlan(
        deployment_target=darwin.macos_min,
        wheel_platform=f"macosx_{floor.major}_{floor.minor}_arm64",
        build_macos=build_macos,
        march=target.march,
        clang_min=darwin.clang_min,
    )


def _target_note(
    recipe: Recipe, model: IsaModel, target: Target, host: Host, options: BuildOptions
) -> str:
    said = ", ".join(f"{f} {'yes' if host.isa.get(f) else 'no'}" for f in sysctl_features(model))
    how = "asked for, and" if options.target else "the one"
    return (
        f"target {target.name}: {how} vLLM {recipe.vllm}'s cmake builds on this Mac, from its "
        f"sysctl ({said}); no switch changes it"
    )


def _env(
    options: BuildOptions, jobs: JobSizing, wheel_version: str, macos: MacosPlan
) -> dict[str, str]:
    return {
        "VLLM_TARGET_DEVICE": "cpu",
        **jobs.env(),
        "CMAKE_BUILD_TYPE": options.build_type,
        "CC": APPLE_CC,
        "CXX": APPLE_CXX,
        "VLLM_VERSION_OVERRIDE": wheel_version,
        "NINJA_STATUS": NINJA_STATUS,
        # the oldest macOS the wheel runs on (clang's -mmacosx-version-min, through cmake) and the
        # wheel's platform tag: a python.org Python would otherwise tag it universal2
        "MACOSX_DEPLOYMENT_TARGET": macos.deployment_target,
        "_PYTHON_HOST_PLATFORM": f"macosx-{macos.deployment_target}-arm64",
        "ARCHFLAGS": "-arch arm64",
    }


def _steps(
    recipe: Recipe,
    options: BuildOptions,
    macos: MacosPlan,
    torch: TorchPin,
    paths: Paths,
    jobs: JobSizing,
    patches: tuple[Patch, ...],
) -> tuple[Step, ...]:
    """What would run on the Mac; the toolkit runs none of it yet (not built on a Mac)."""
    march = f", -march={macos.march}" if macos.march else ""
    return (
        Step(
            name="fetch-source",
            summary=f"use the source tree {options.source_dir}"
            if options.source_dir
            else f"download {recipe.sdist}, check sha256 {recipe.sha256[:12]}…",
        ),
        *patch_steps(patches, options),
        Step(
            name="check-toolchain",
            summary=f"{APPLE_CXX} is Apple clang >= {macos.clang_min} (Xcode Command Line "
            f"Tools), cmake >= {recipe.cmake_min}, ninja; no numa.h: vLLM builds without "
            "NUMA on macOS",
        ),
        *venv_steps(recipe, torch, paths),
        Step(
            name="compile",
            summary=f"pip wheel --no-build-isolation with MAX_JOBS={jobs.max_jobs}{march}, "
            f"log at {paths.log}",
        ),
        Step(
            name="deliver",
            summary=f"the {macos.wheel_platform} wheel and its manifest into {paths.wheel_dir} "
            "(no auditwheel: the kernel library takes libomp from torch at run time)",
        ),
    )
