"""What the compile is told besides the target's own switches: the kernel-tier switch, CMAKE_ARGS
(oneDNN limited to the target's ISA and its unused units left out, the job pools, a cross build's
toolchain file), the Arm Compute Library, and the switches only a recipe patch adds."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from toolchain.errors import PlanError
from toolchain.options import BuildOptions
from toolchain.plan.cross import ACL_SWITCH, CrossPlan
from toolchain.plan.cross import cmake_args as cross_cmake_args
from toolchain.plan.jobs import JobSizing
from toolchain.plan.onednn_callers import callers_digest, tree_callers, without_patches
from toolchain.plan.recipes import TIERS_SWITCHES, OnednnPrune, Patch, Recipe
from toolchain.targets import ONEDNN_GEMM_ISAS, IsaModel, Target

# The live progress line reads ninja's "[done/total]"
NINJA_STATUS = "[%f/%t] "
DATA = Path(str(resources.files("toolchain") / "data"))
PRUNE_CMAKE, POOLS_CMAKE = DATA / "prune-onednn.cmake", DATA / "job-pools.cmake"
LIBRARIES_CMAKE, TORCH_LEAN = DATA / "vllm-libraries.cmake", DATA / "torch-lean"
# the cache entries the includes the toolkit passes set, unset first (cmake -U, in order)
FORGET = (
    "-UCMAKE_PROJECT_INCLUDE",
    "-UCMAKE_PROJECT_oneDNN_INCLUDE",
    "-UCMAKE_PROJECT_vllm_extensions_INCLUDE",
    "-UVCB_*",
)
ACL_NAME = "ComputeLibrary"


def kernel_env(
    recipe: Recipe,
    model: IsaModel,
    target: Target,
    patches: tuple[Patch, ...],
    options: BuildOptions,
) -> dict[str, str]:
    """The switch that limits the compile to the target's kernel tiers: an x86 target compiling
    fewer than every tier, or any Arm target with tiers (upstream compiles one `_C` there)."""
    switch = TIERS_SWITCHES.get(target.arch)
    if switch is None or not target.kernel_tiers:
        return {}
    every_tier = {tier for t in model.targets.values() for tier in t.kernel_tiers}

    def unpatched(t: Target) -> bool:  # upstream's source builds it as it is
        return not t.kernel_tiers or (
            switch.unpatched_builds_all and set(t.kernel_tiers) == every_tier
        )

    if unpatched(target):
        return {}
    if options.source_dir:  # built as it is: the tree must have the switch already
        setup = options.source_dir / "setup.py"
        patched = setup.is_file() and switch.name in setup.read_text(errors="replace")
        why = f"{setup} does not read it"
    else:
        patched = any(switch.name in p.enables for p in patches)
        why = "the recipe has no such patch"
    if not patched:
        plain = " or ".join(t.name for t in model.targets.values() if unpatched(t))
        raise PlanError(
            f"target {target.name} compiles {', '.join(target.kernel_tiers)}, which "
            f"needs a patch adding {switch.name} to vLLM {recipe.vllm}: {why}",
            hint=f"build --target {plain}, or the sdist with the recipe's patch "
            f"(recipes/patches/{switch.patch})",
        )
    return {switch.name: ",".join(target.kernel_tiers)}


def cmake_args(
    target: Target,
    prune: OnednnPrune | None,
    jobs: JobSizing,
    recipe_files: Path,
    cross: CrossPlan | None,
    acl: bool | None,
    precompiled: tuple[str, ...],
    lean: bool,
    opt_level: str | None,
) -> dict[str, str]:
    """CMAKE_ARGS: a cross build's toolchain file, oneDNN limited to the target's ISA (and on
    Arm without ACL when the mirror has none), the oneDNN units it never links left out (the
    list as the recipe was loaded, written into the build folder by the compile step), the
    units put into the job pools, vLLM's libraries given the lean <torch/all.h>, those
    that precompile it, and their optimisation level when it is not their build type's own."""
    # vLLM's configure reuses the build folder's CMakeCache.txt: what an earlier plan of this
    # folder set and this one does not (a prune list the recipe dropped, job pools) would stay
    args = [*FORGET, *(cross_cmake_args(cross) if cross else [])]
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
            f"-DCMAKE_PROJECT_oneDNN_INCLUDE={no_space(PRUNE_CMAKE)}",
            f"-DVCB_ONEDNN_SKIP={no_space(recipe_files / prune.file.name)}",
        ]
    if jobs.pools:
        args += jobs.pool_cmake_args(no_space(POOLS_CMAKE))
    if lean or precompiled or opt_level:
        args.append(f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={no_space(LIBRARIES_CMAKE)}")
    if opt_level:
        args.append(f"-DVCB_OPT_LEVEL=-{opt_level}")
    if lean:
        args.append(f"-DVCB_TORCH_LEAN={no_space(lean_header_dir(recipe_files))}")
    if precompiled:
        args.append(f"-DVCB_PCH_TARGETS={','.join(precompiled)}")
    return {"CMAKE_ARGS": " ".join(args)}


def precompiled_libraries(
    target: Target, arch: str, options: BuildOptions, warnings: list[str]
) -> tuple[str, ...]:
    """The kernel libraries that compile <torch/all.h> once (vllm-libraries.cmake), not in each of
    their units: every one the target builds, unless the user turns it off, the units compile
    on sccache-dist's build servers (precompiling here would only add work here; a warning when
    the user asked for it), or, unless asked, the target is no x86 one (measured and checked
    with upstream's kernel tests on x86 only: docs/benchmarks.md). The kernels' code is not byte
    for byte that of a build without."""
    asked = options.given("precompiled_headers")
    if not options.get("precompiled_headers", bool) or (arch != "x86_64" and not asked):
        return ()
    if options.dist is not None:
        if asked:
            warnings.append(
                "--precompiled-headers is ignored with --dist-scheduler: the units compile on "
                "the build servers"
            )
        return ()
    return target.kernel_tiers or ("_C",)


def lean_header_dir(recipe_files: Path) -> Path:
    """Where the compile step writes the lean <torch/all.h> (TORCH_LEAN) for CMAKE_ARGS: in the
    build folder, inside CCACHE_BASEDIR, so no unit's cache key holds the toolkit's own path (a
    shared cache then hits for every install of the toolkit)."""
    return recipe_files / "torch-lean"


def no_space(path: Path) -> Path:
    """vLLM's setup.py splits CMAKE_ARGS at spaces: a path with one cannot pass."""
    if " " in str(path):
        raise PlanError(
            f"{path} has a space, which vLLM's setup.py cannot pass to cmake",
            hint="install the toolkit (and its recipes) in a folder without spaces",
        )
    return path


def onednn_prune(
    recipe: Recipe,
    target: Target,
    source_dir: Path | None = None,
    warnings: list[str] | None = None,
    patches: tuple[Patch, ...] = (),
    acl: bool | None = None,
) -> OnednnPrune | None:
    """The recipe's list of oneDNN units this target never links, if it has one. A --source-dir
    tree keeps it only if it calls oneDNN exactly as the release the list was learned from (its
    `callers` digest), as it is or with the recipe's `patches` taken back out (the plan asks for
    them to be applied by hand): a changed caller may link a unit the list leaves out, and the
    link fails. Nor does an aarch64 build whose use of the Arm Compute Library differs from the
    list's build (`acl`): ACL's units call others."""
    prune = next((p for p in recipe.onednn_prune if p.applies_to(target.name, target.arch)), None)
    if prune is not None and None not in (prune.acl, acl) and prune.acl != acl:
        if warnings is not None:
            learned, now = ("with", "without") if prune.acl else ("without", "with")
            warnings.append(
                f"oneDNN compiles whole: the list {prune.file.name} was learned {learned} the Arm "
                f"Compute Library and this build is {now} it (other units link)"
            )
        return None
    if prune is None or source_dir is None or prune.callers is None:
        return prune
    tree = tree_callers(source_dir)
    found = callers_digest(tree)
    unpatched = callers_digest(without_patches(tree, (p.content for p in patches)))
    if prune.callers in (found, unpatched):
        return prune
    if warnings is not None:
        warnings.append(
            f"oneDNN compiles whole: {source_dir} calls oneDNN otherwise than vLLM "
            f"{recipe.vllm}'s sdist (callers {found[:19]}..., the list {prune.file.name} was "
            f"learned from {prune.callers[:19]}...)"
        )
    return None


def arm_acl(
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
    return not has_switch(options, patches, ACL_SWITCH)


def has_switch(options: BuildOptions, patches: tuple[Patch, ...], switch: str) -> bool:
    """Whether the source reads this build switch: the recipe's patch adds it, or a
    --source-dir tree has it already."""
    if options.source_dir:
        found = (options.source_dir / name for name in ("setup.py", "cmake/cpu_extension.cmake"))
        return any(f.is_file() and switch in f.read_text(errors="replace") for f in found)
    return any(switch in p.enables for p in patches)


def require_switch(
    recipe: Recipe, options: BuildOptions, patches: tuple[Patch, ...], switch: str, what: str
) -> None:
    if not has_switch(options, patches, switch):
        raise PlanError(
            f"{what} needs vLLM {recipe.vllm} to read {switch}, which only a recipe patch adds "
            "(upstream's setup.py and cmake take the machine from the build machine)",
            hint="use a release whose recipe has the cross patch (0.32.0), or build on a "
            "machine of the target's architecture",
        )
