"""What a build compiles from: the sdist (or a --source-dir tree), the third-party sources
cmake would download and their mirror copies, and the recipe patches."""

from __future__ import annotations

from pathlib import Path

from toolchain.options import BuildOptions
from toolchain.plan.buildplan import Dependency, Source
from toolchain.plan.recipes import Patch, Recipe
from toolchain.plan.switches import ACL_NAME
from toolchain.util.source_lock import LOCK_NAME


def plan_source(recipe: Recipe, options: BuildOptions) -> Source:
    if options.source_dir:
        return Source(kind="source-dir", path=options.source_dir, sha256=None)
    return Source(
        kind="sdist",
        sdist=recipe.sdist,
        sha256=recipe.sha256,
        cache=options.work_dir / "sdists" / recipe.sha256 / recipe.sdist,
        mirror=options.sources,
    )


def third_party_sources(
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


def patch_warnings(patches: tuple[Patch, ...], options: BuildOptions) -> list[str]:
    if not (patches and options.source_dir):
        return []
    names = ", ".join(str(p.file) for p in patches)
    return [f"recipe patches are not applied to a --source-dir tree; apply them yourself: {names}"]
