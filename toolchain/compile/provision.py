"""Provision a g++ into a private prefix from another Debian release, changing nothing system-wide.

`apt-get download` with a private sources list and state folder fetches the packages (apt checks
them against the release's signed index), `dpkg-deb -x` unpacks them, and the
compiler's programs are pointed at the unpacked loader and libraries: the drivers by a script that
is the same in every prefix (what a shared compile cache hashes), the rest by patchelf.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
from pathlib import Path

from toolchain.errors import ProvisionError
from toolchain.plan.compiler import GxxRecipe, gxx_recipe, prefix_for, provisioned_gxx
from toolchain.util import run
from toolchain.util.files import atomic_path
from toolchain.util.report import reporter

# the layout version: a prefix provisioned by an older toolkit (patched drivers) is made anew
MARKER = ".vcb-provisioned-2"
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
    debs = _download(recipe, work_dir / "apt" / recipe.release, triplet, log=log)
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


def dist_toolchain(work_dir: Path, arch: str, *, log: Path) -> tuple[Path, tuple[str, str]]:
    """A toolchain archive for sccache-dist build servers, and the (gcc, g++) inside it.

    The provisioned prefix runs Debian's programs through scripts that sccache cannot package, so
    the build server gets a root made of the same Debian packages (and binutils), unpacked as they
    are: there the programs find the loader and libraries where Debian puts them.
    """
    recipe, prefix = gxx_recipe(), prefix_for(work_dir)
    triplet = TRIPLETS[arch]
    programs = (f"/usr/bin/{triplet}-gcc-{recipe.major}", f"/usr/bin/{triplet}-g++-{recipe.major}")
    archive = prefix.with_name(f"{prefix.name}.dist.tar.gz")
    if archive.is_file():
        return archive, programs
    debs = work_dir / "apt" / recipe.release / "debs"
    names = (prefix / MARKER).read_text().split()
    with tempfile.TemporaryDirectory(prefix=".dist-root-", dir=prefix.parent) as folder:
        root = Path(folder)
        for name in names:
            run.run_logged(["dpkg-deb", "-x", debs / name, root], log=log)
        for link in ("bin", "lib", "lib64", "sbin"):  # Debian 13 is merged-/usr
            if (root / "usr" / link).is_dir():
                (root / link).symlink_to(f"usr/{link}")
        shutil.rmtree(root / "usr" / "share", ignore_errors=True)
        reporter.detail(f"packing {archive.name} for the build servers")
        with atomic_path(archive) as temporary, tarfile.open(temporary, "w:gz") as tar:
            tar.add(root, arcname=".")
    return archive, programs


def _apt_options(state: Path, recipe: GxxRecipe) -> list[str]:
    return apt_options(
        state, keyring=recipe.keyring, archive=recipe.archive, release=recipe.release
    )


def apt_options(
    state: Path, *, keyring: str, archive: str, release: str, arch: str | None = None
) -> list[str]:
    """apt with a private sources list and state folder (and another architecture's packages
    with `arch`): nothing of the system's apt changes."""
    sources = state / "sources.list"
    sources.parent.mkdir(parents=True, exist_ok=True)
    sources.write_text(f"deb [signed-by={keyring}] {archive} {release} main\n")
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    options = [
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
    if arch is not None:
        options += ["-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures={arch}"]
    return options


def _download(recipe: GxxRecipe, state: Path, triplet: str, *, log: Path) -> dict[str, list[Path]]:
    options = _apt_options(state, recipe)
    run.run_logged(["apt-get", *options, "update"], log=log, what="apt-get update")
    debs = state / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    gnu_arch = triplet.split("-")[0].replace("_", "-")
    groups = {
        "compiler": list(recipe.compiler),
        "runtime": list(recipe.runtime),
        "dist": [package.replace("{arch}", gnu_arch) for package in recipe.dist],
    }
    run.run_logged(
        ["apt-get", *options, "download", *(p for group in groups.values() for p in group)],
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
    """Compiler programs run on the unpacked (newer) libc, never on the host's.

    The drivers (g++, gcc, ...) are what a compile cache hashes to know the compiler, so they
    must be the same bytes on every machine: each becomes a small script that finds the loader
    beside itself and runs the untouched Debian program. The programs the drivers start (cc1plus,
    collect2, ...) are patched to name the loader: their bytes hold the prefix, and nothing hashes
    them.
    """
    libs = prefix / "runtime" / "usr" / "lib" / triplet
    loader = next(libs.glob("ld-linux*.so*"), None)
    if loader is None:
        raise ProvisionError(f"no dynamic loader was unpacked into {libs}")
    bin_dir = prefix / "usr" / "bin"
    for driver in bin_dir.glob(f"{triplet}-*-{major}"):
        if not driver.is_symlink() and _is_elf(driver):
            _wrap_driver(driver, loader.relative_to(prefix))
    for name in GCC_PROGRAMS:
        program = prefix / "usr" / "lib" / "gcc" / triplet / major / name
        if _is_elf(program):
            patchelf = run.own_program("patchelf")  # the one the preflight checked
            run.run_logged(
                [patchelf, "--set-interpreter", loader, "--set-rpath", libs, program], log=log
            )


def _wrap_driver(driver: Path, loader: Path) -> None:
    """Replace an ELF driver with a script that is byte-identical in every prefix.

    The untouched program is kept beside it as `.NAME.elf` (gcc finds its own programs relative
    to argv[0], which `--argv0` keeps pointing at the script). Its sha256 is written into the
    script, so that a cache keyed on the script still tells one compiler build from another.
    """
    real = driver.with_name(f".{driver.name}.elf")
    driver.rename(real)
    digest = hashlib.sha256(real.read_bytes()).hexdigest()
    driver.write_text(
        "#!/bin/sh\n"
        f"# {driver.name}, provisioned by vllm-cpu-builder: runs the Debian program\n"
        f"# {real.name} (sha256 {digest})\n"
        "# on the loader and C library unpacked into this prefix.\n"
        'here=$(dirname "$(readlink -f "$0")")\n'
        f'lib="$here/../../{loader.parent}"\n'
        f'exec "$lib/{loader.name}" --library-path "$lib" --argv0 "$0" "$here/{real.name}" "$@"\n'
    )
    driver.chmod(0o755)


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
