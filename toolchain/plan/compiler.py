"""Which g++ a build uses: the user's, one on PATH that is new enough, else a provisioned one.

Where a provisioned g++ lives is decided here; build/provision.py puts it there.
"""

from __future__ import annotations

import functools
import re
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packaging.version import Version

from toolchain.detect.host import Host
from toolchain.errors import PlanError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import Compiler, Step
from toolchain.plan.cross import CrossPlan
from toolchain.plan.recipes import Recipe
from toolchain.util.datafile import load_toml, string, string_list, table


@dataclass(frozen=True, kw_only=True)
class GxxRecipe:
    name: str
    version: str
    major: str
    release: str
    archive: str
    keyring: str
    compiler: tuple[str, ...]
    runtime: tuple[str, ...]
    dist: tuple[str, ...]  # added for a build server's root (binutils); {arch}: x86-64, aarch64


@functools.cache
def gxx_recipe() -> GxxRecipe:
    path = Path(str(resources.files("toolchain") / "data" / "provision.toml"))
    data = table(load_toml(path), "gxx", where=str(path))
    where = f"{path} [gxx]"
    fields = {
        key: string(data, key, where=where)
        for key in ("name", "version", "major", "release", "archive", "keyring")
    }
    return GxxRecipe(
        **fields,
        compiler=string_list(data, "compiler", where=where),
        runtime=string_list(data, "runtime", where=where),
        dist=string_list(data, "dist", where=where),
    )


def prefix_for(work_dir: Path) -> Path:
    return work_dir / "toolchains" / gxx_recipe().name


def provisioned_gxx(prefix: Path) -> tuple[Path, Path]:
    major = gxx_recipe().major
    return prefix / "usr" / "bin" / f"gcc-{major}", prefix / "usr" / "bin" / f"g++-{major}"


def choose_compiler(
    recipe: Recipe, host: Host, options: BuildOptions
) -> tuple[Compiler, list[Step]]:
    """A g++ new enough for the recipe: the user's, one on PATH, else a provisioned one."""
    minimum = recipe.gxx_min.get(host.arch)
    if options.cxx:
        cxx = options.cxx
        if shutil.which(cxx) is None:
            raise PlanError(
                f"--cxx / CXX names {cxx}, which is not an executable here",
                hint="give the path of a g++ (e.g. /usr/bin/g++-14), or leave it out",
            )
        return Compiler(
            cxx=cxx,
            cc=_matching_cc(cxx),
            version="checked at build time",
            origin="CXX / --cxx",
            minimum=minimum or "",
        ), []
    candidates = [
        tool
        for tool in host.tools
        if re.fullmatch(r"g\+\+(-\d+)?", tool.name)
        and tool.version
        and (minimum is None or Version(tool.version) >= Version(minimum))
    ]
    if candidates:
        best = max(candidates, key=lambda tool: Version(tool.version or "0"))
        return Compiler(
            cxx=best.path,
            cc=_matching_cc(best.path),
            version=best.version or "",
            origin="PATH",
            minimum=minimum or "",
        ), []
    recipe_gxx, prefix = gxx_recipe(), prefix_for(options.work_dir)
    cc_path, cxx_path = provisioned_gxx(prefix)
    found = ", ".join(f"{t.name} {t.version}" for t in host.tools if t.name.startswith("g++"))
    step = Step(
        name="provision-toolchain",
        summary=f"unpack Debian {recipe_gxx.release}'s g++-{recipe_gxx.major} "
        f"{recipe_gxx.version} into {prefix} (found: {found or 'no g++'}; need >= {minimum})",
    )
    return Compiler(
        cxx=str(cxx_path),
        cc=str(cc_path),
        version=recipe_gxx.version,
        origin="provisioned",
        minimum=minimum or "",
    ), [step]


def _matching_cc(cxx: str) -> str:
    path = Path(cxx)
    return str(path.with_name(path.name.replace("g++", "gcc").replace("c++", "cc")))


def cross_compiler(cross: CrossPlan, options: BuildOptions) -> tuple[Compiler, list[Step]]:
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
