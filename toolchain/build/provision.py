"""Provision a g++ into a private prefix from another Debian release, changing nothing system-wide.

`apt-get download` with a private sources list and state folder fetches the packages (apt checks
them against the release's signed index), `dpkg-deb -x` unpacks them, and patchelf points the
compiler's programs at the unpacked loader and libraries.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from toolchain.errors import ProvisionError
from toolchain.plan.compiler import GxxRecipe, gxx_recipe, prefix_for, provisioned_gxx
from toolchain.util import run
from toolchain.util.report import reporter

MARKER = ".vcb-provisioned"
TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
GCC_PROGRAMS = ("cc1", "cc1plus", "collect2", "lto-wrapper", "lto1")


def provision_gxx(work_dir: Path, arch: str, *, log: Path) -> Path:
    """The prefix with a working g++; reused when an earlier run finished it."""
    recipe, prefix = gxx_recipe(), prefix_for(work_dir)
    if (prefix / MARKER).is_file():
        reporter.detail(f"reusing {prefix}")
        return prefix
    triplet = TRIPLETS[arch]
    # Built in place: the patched programs name absolute paths inside the prefix. The marker,
    # written last, is what makes a prefix count as finished.
    shutil.rmtree(prefix, ignore_errors=True)
    debs = _download(recipe, work_dir / "apt" / recipe.release, log=log)
    (prefix / "runtime").mkdir(parents=True)
    for deb in debs["compiler"]:
        run.run_logged(["dpkg-deb", "-x", deb, prefix], log=log)
    for deb in debs["runtime"]:
        run.run_logged(["dpkg-deb", "-x", deb, prefix / "runtime"], log=log)
    _point_at_private_loader(prefix, triplet, recipe.major, log=log)
    _link_host_runtime(prefix, triplet, recipe.major)
    _smoke_test(prefix, log=log)
    (prefix / MARKER).write_text("\n".join(p.name for group in debs.values() for p in group) + "\n")
    return prefix


def _apt_options(state: Path, recipe: GxxRecipe) -> list[str]:
    sources = state / "sources.list"
    sources.parent.mkdir(parents=True, exist_ok=True)
    sources.write_text(f"deb [signed-by={recipe.keyring}] {recipe.archive} {recipe.release} main\n")
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    return [
        "-o",
        f"Dir::Etc::SourceList={sources}",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        f"Dir::State::Lists={state / 'lists'}",
        "-o",
        f"Dir::Cache::Archives={state / 'archives'}",
        "-o",
        "Dir::Cache::pkgcache=",
        "-o",
        "Dir::Cache::srcpkgcache=",
        "-o",
        "Debug::NoLocking=1",
        "-o",
        "APT::Sandbox::User=root",
    ]


def _download(recipe: GxxRecipe, state: Path, *, log: Path) -> dict[str, list[Path]]:
    options = _apt_options(state, recipe)
    run.run_logged(["apt-get", *options, "update"], log=log, what="apt-get update")
    debs = state / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    groups = {"compiler": list(recipe.compiler), "runtime": list(recipe.runtime)}
    run.run_logged(
        ["apt-get", *options, "download", *groups["compiler"], *groups["runtime"]],
        log=log,
        cwd=debs,
        what="apt-get download",
    )
    found: dict[str, list[Path]] = {}
    for group, packages in groups.items():
        found[group] = []
        for package in packages:
            name, _, version = package.partition("=")
            pattern = f"{name}_{version.replace(':', '%3a') or '*'}_*.deb"
            matches = sorted(debs.glob(pattern))
            if not matches:
                raise ProvisionError(f"apt-get download left no {pattern} in {debs}")
            found[group].append(matches[-1])
    return found


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _point_at_private_loader(prefix: Path, triplet: str, major: str, *, log: Path) -> None:
    """Compiler programs run on the unpacked (newer) libc, never on the host's."""
    libs = prefix / "runtime" / "usr" / "lib" / triplet
    loader = next(libs.glob("ld-linux*.so*"), None)
    if loader is None:
        raise ProvisionError(f"no dynamic loader was unpacked into {libs}")
    programs = [
        p for p in (prefix / "usr" / "bin").glob(f"{triplet}-*-{major}") if not p.is_symlink()
    ]
    programs += [prefix / "usr" / "lib" / "gcc" / triplet / major / name for name in GCC_PROGRAMS]
    for program in programs:
        if _is_elf(program):
            run.run_logged(
                ["patchelf", "--set-interpreter", loader, "--set-rpath", libs, program], log=log
            )


def _link_host_runtime(prefix: Path, triplet: str, major: str) -> None:
    """Linking uses the host's libstdc++ and libgomp (and the host's ld loads the LTO plugin)."""
    gcc_dir = prefix / "usr" / "lib" / "gcc" / triplet / major
    for link in [p for p in gcc_dir.iterdir() if p.is_symlink()]:
        host_lib = Path("/usr/lib") / triplet / Path(str(link.readlink())).name
        link.unlink()
        if host_lib.exists():
            link.symlink_to(host_lib)
    plugins = sorted(Path("/usr/lib/gcc", triplet).glob("*/liblto_plugin.so"))
    same_major = [p for p in plugins if p.parent.name == major]
    plugin = gcc_dir / "liblto_plugin.so"
    plugin.unlink(missing_ok=True)
    for stale in (prefix / "usr" / "libexec" / "gcc" / triplet / major).glob("liblto_plugin.so"):
        stale.unlink()
    if not (same_major or plugins):
        raise ProvisionError(
            "the host has no gcc LTO plugin for its ld to load",
            hint="apt-get install gcc (any version)",
        )
    plugin.symlink_to((same_major or plugins)[-1])


def _smoke_test(prefix: Path, *, log: Path) -> None:
    _, gxx = provisioned_gxx(prefix)
    test_dir = prefix.parent / f".{prefix.name}.smoke"
    shutil.rmtree(test_dir, ignore_errors=True)
    test_dir.mkdir()
    source = test_dir / "smoke.cc"
    source.write_text(
        "#include <iostream>\n#include <omp.h>\n"
        "int main() { std::cout << omp_get_max_threads() << '\\n'; }\n"
    )
    try:
        run.run_logged(
            [gxx, "-O2", "-fopenmp", source, "-o", test_dir / "smoke"],
            log=log,
            what="a test compile with the provisioned g++",
        )
        run.run_logged([test_dir / "smoke"], log=log, what="the test program")
    finally:
        shutil.rmtree(test_dir, ignore_errors=True)
