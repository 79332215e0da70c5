"""`learn-prune`: a target's oneDNN prune list, learned from its finished build-wheel build and
written as the recipe's list file; the `[[onednn_prune]]` lines to paste when the recipe does
not name that file yet."""

from __future__ import annotations

import datetime
import shlex
from dataclasses import dataclass
from pathlib import Path

from toolchain.compile.onednn_prune import (
    Learned,
    cmake_cache_entry,
    learn,
    render_list,
    write_list,
)
from toolchain.errors import BuildError, ToolchainError, UsageError
from toolchain.plan.onednn_callers import (
    callers_digest,
    sdist_callers,
    tree_callers,
    without_patches,
)
from toolchain.plan.recipes import Recipe, load_recipe
from toolchain.util.platform import machine_arch

PRUNE_DIR = "onednn-prune"


@dataclass(frozen=True, kw_only=True)
class PruneRequest:
    recipe: Recipe
    recipes_dir: Path
    target: str
    arch: str | None  # None: the architecture whose ISA model has the target
    python: str | None  # None: the one build of the target there is
    work_dir: Path
    libraries: tuple[str, ...] = ()  # empty: every library that links oneDNN
    to: Path | None = None  # None: the file the recipe names, else onednn-prune/vllm-V-ARCH-T.txt

    def command(self, arch: str) -> str:
        """The command that learns this list again, for the list's header."""
        words = ["python", "-m", "toolchain", "learn-prune", "--vllm", str(self.recipe.vllm)]
        words += ["--target", self.target, "--arch", arch, "--work-dir", str(self.work_dir)]
        words += ["--python", self.python] if self.python else []
        return shlex.join([*words, *(f"--library={name}" for name in self.libraries)])


@dataclass(frozen=True, kw_only=True)
class PruneOutcome:
    path: Path
    learned: Learned
    arch: str
    callers: str  # the digest of the oneDNN callers of the build's sources
    entry: str | None  # the [[onednn_prune]] lines to paste; None: the recipe has them already


def target_arch(recipe: Recipe, target: str, arch: str | None) -> str:
    """--arch, or the one architecture whose ISA model has the target (this machine's when
    both have it)."""
    having = [name for name, model in recipe.isa_models.items() if target in model.targets]
    if arch is not None and arch not in having:
        raise UsageError(
            f"vLLM {recipe.vllm} has no target '{target}' on {arch}",
            hint=f"its {arch} targets: {', '.join(recipe.isa_models[arch].targets)}",
        )
    if not having:
        known = sorted({t for model in recipe.isa_models.values() for t in model.targets})
        raise UsageError(
            f"vLLM {recipe.vllm} has no target '{target}'", hint=f"its targets: {', '.join(known)}"
        )
    if arch is None and len(having) > 1:
        if machine_arch() not in having:
            raise UsageError(
                f"target '{target}' is built for {' and '.join(having)}",
                hint="say which build to learn from with --arch",
            )
        return machine_arch()
    return arch or having[0]


def finished_build(request: PruneRequest, arch: str) -> Path:
    """The build folder build-wheel used for this release, target and Python."""
    python = f"cp{request.python.replace('.', '')}" if request.python else "cp*"
    stem = f"vllm-{request.recipe.vllm}-{arch}-{request.target}-"
    builds = request.work_dir / "builds"
    found = sorted(builds.glob(stem + python))
    if not found:
        raise BuildError(
            f"no build of vLLM {request.recipe.vllm} '{request.target}' for {arch} in {builds}",
            hint=f"build it first: python -m toolchain build-wheel --vllm {request.recipe.vllm} "
            f"--target {request.target} --work-dir {request.work_dir}",
        )
    if len(found) > 1:
        raise UsageError(
            f"{len(found)} builds of that target in {builds}: {', '.join(p.name for p in found)}",
            hint="say which with --python",
        )
    return found[0]


def ninja_folder(build_dir: Path) -> Path:
    """The CMake build folder setup.py made (`src/build/temp.*`), which holds build.ninja."""
    found = sorted((build_dir / "src" / "build").glob("temp.*/build.ninja"))
    if not found:
        raise BuildError(
            f"{build_dir} has no src/build/temp.*/build.ninja: its compile never started",
            hint="finish the build (build-wheel), then learn from it",
        )
    return found[-1].parent


def destination(request: PruneRequest, arch: str) -> Path:
    """--to, else the file the recipe names for this target, else vllm-V-ARCH-T.txt. A file the
    recipe inherited (its measured release names it too, and so may every release between) is
    that release's list: a build of this one gets its own file."""
    if request.to is not None:
        return request.to
    named = next(
        (p.file for p in request.recipe.onednn_prune if p.applies_to(request.target, arch)), None
    )
    if named is not None and named not in inherited_lists(request, arch):
        return named
    name = f"vllm-{request.recipe.vllm}-{arch}-{request.target}.txt"
    return request.recipes_dir / PRUNE_DIR / name


def inherited_lists(request: PruneRequest, arch: str) -> set[Path]:
    """The list files of this target that the recipe took from its measured release."""
    measured = request.recipe.inherited_from
    if measured is None or measured == request.recipe.vllm:
        return set()
    try:
        other = load_recipe(request.recipes_dir, str(measured))
    except ToolchainError:
        return set()
    return {p.file for p in other.onednn_prune if p.applies_to(request.target, arch)}


def release_callers(request: PruneRequest, build_dir: Path, arch: str) -> str:
    """The oneDNN callers digest of the release the build compiled, as new-recipe and build-wheel
    compute it: of its sdist as build-wheel cached it, else of the build's unpacked tree with the
    recipe's patches (which build-wheel applied to it) taken back out."""
    recipe = request.recipe
    sdist = request.work_dir / "sdists" / recipe.sha256 / recipe.sdist
    if sdist.is_file():
        return callers_digest(sdist_callers(sdist))
    patches = (p.content for p in recipe.patches if p.applies_to(arch))
    return callers_digest(without_patches(tree_callers(build_dir / "src"), patches))


def recipe_entry(
    request: PruneRequest,
    arch: str,
    path: Path,
    learned: Learned,
    callers: str,
    acl: bool | None = None,
) -> str | None:
    """The [[onednn_prune]] lines for this list, or None when the recipe names this file with
    these callers (and, on aarch64, this use of the Arm Compute Library)."""
    for prune in request.recipe.onednn_prune:
        recorded = (prune.file.resolve(), prune.callers, prune.acl)
        if prune.applies_to(request.target, arch) and recorded == (path.resolve(), callers, acl):
            return None
    try:
        file = path.resolve().relative_to(request.recipes_dir.resolve()).as_posix()
    except ValueError:
        file = f"{PRUNE_DIR}/{path.name}"  # where it must go: the recipe names files inside
    libraries = ", ".join(learned.libraries)
    verb = "link" if len(learned.libraries) > 1 else "links"
    return "\n".join(
        [
            "[[onednn_prune]]",
            "# Learned by python -m toolchain learn-prune (the file's header says how).",
            f'target = "{request.target}"',
            f'arch = "{arch}"',
            f'file = "{file}"',
            f'callers = "{callers}"',
            *([] if acl is None else [f"acl = {str(acl).lower()}"]),
            'reason = "oneDNN compiles every CPU source whatever ISA and primitives are enabled; '
            f'{libraries} {verb} {learned.kept} of its {learned.units} units"',
        ]
    )


def _build_named(recipe: Recipe, target: str, arch: str) -> str:
    onednn = [dep.ref for dep in recipe.third_party_for(arch) if dep.name == "oneDNN"]
    return f"vLLM {recipe.vllm}'s `{target}` build for {arch}" + (
        f" (oneDNN {onednn[0]})" if onednn else ""
    )


def built_with_acl(folder: Path, arch: str) -> bool | None:
    """aarch64: whether the build's oneDNN used the Arm Compute Library (vLLM's cmake sets
    ONEDNN_AARCH64_USE_ACL), read from its CMakeCache.txt; None elsewhere or when not there."""
    if arch != "aarch64":
        return None
    try:
        value = cmake_cache_entry(folder, "ONEDNN_AARCH64_USE_ACL")
    except OSError:
        return None
    return None if value is None else value.upper() in {"ON", "TRUE", "1", "YES"}


def learn_prune(request: PruneRequest) -> PruneOutcome:
    arch = target_arch(request.recipe, request.target, request.arch)
    build_dir = finished_build(request, arch)
    venv_ninja = build_dir / "venv" / "bin" / "ninja"  # the ninja that wrote the build's logs
    folder = ninja_folder(build_dir)
    learned = learn(
        folder,
        request.libraries,
        ninja=str(venv_ninja) if venv_ninja.is_file() else "ninja",
    )
    path = destination(request, arch)
    text = render_list(
        learned,
        build=_build_named(request.recipe, request.target, arch),
        command=request.command(arch),
        day=datetime.datetime.now(datetime.UTC).date().isoformat(),
    )
    callers = release_callers(request, build_dir, arch)
    write_list(path, text)
    entry = recipe_entry(request, arch, path, learned, callers, built_with_acl(folder, arch))
    return PruneOutcome(path=path, learned=learned, arch=arch, callers=callers, entry=entry)
