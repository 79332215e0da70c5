"""A cross build's own steps: its compiler and sysroot, and the target's torch.

The cross g++ is Debian's package for the build machine, installed with apt-get at the versions
toolchain/data/cross.toml pins when it is missing. The target's libraries are the release's
packages for the host machine, downloaded with a private apt state (or taken from the folder a
previous run left, offline), checked against the sha256 the data file records and unpacked into a
private sysroot. The target's torch is a wheel for the host machine's platform, seen through a
CUDA-free view (toolchain/compile/torch_view.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from toolchain.compile.provision import apt_options
from toolchain.compile.torch_view import make_torch_view
from toolchain.detect.tools import tool_version
from toolchain.errors import BuildError, ProcessFailedError, ProvisionError
from toolchain.plan.cross import (
    CrossPlan,
    SysrootPackage,
    cross_toolchains,
    target_python_text,
    toolchain_file_text,
)
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.util.files import atomic_path, sha256_file
from toolchain.util.report import reporter

MARKER = ".vcb-sysroot"


def provision_cross(cross: CrossPlan, work_dir: Path, *, log: Path) -> dict[str, Any]:
    """The cross compiler (installed when missing) and the sysroot; what the manifest records."""
    toolchain = cross_toolchains()[cross.host_machine]
    version = tool_version(cross.cxx)
    if version is None:
        reporter.detail(
            f"{cross.cxx} is missing: apt-get install {' '.join(cross.compiler_packages)}"
        )
        run.run_logged(
            ["apt-get", "install", "-y", "--no-install-recommends", *cross.compiler_packages],
            log=log,
            what="installing the cross compiler",
        )
        version = tool_version(cross.cxx)
    if version is None:
        raise ProvisionError(
            f"{cross.cxx} does not run after installing {', '.join(cross.compiler_packages)}",
            hint="install Debian's g++-12-aarch64-linux-gnu yourself, or pass --cxx",
        )
    state = work_dir / "apt" / f"{toolchain.release}-{toolchain.debian_arch}"
    debs = _sysroot_debs(cross, state, toolchain.keyring, toolchain.archive, log=log)
    _unpack_sysroot(cross.sysroot, debs, log=log)
    reporter.detail(f"g++ {version} at {cross.cxx}; sysroot {cross.sysroot}")
    return {
        "compiler_version": version,
        "compiler_packages": list(cross.compiler_packages),
        "sysroot": str(cross.sysroot),
        "sysroot_packages": [
            {"package": p.package, "version": p.version, "sha256": p.sha256}
            for p in cross.sysroot_packages
        ],
    }


def _sysroot_debs(
    cross: CrossPlan, state: Path, keyring: str, archive: str, *, log: Path
) -> list[Path]:
    """The sysroot's .debs, checked; downloaded only when the folder lacks one."""
    folder = state / "debs"
    missing = [p for p in cross.sysroot_packages if _deb(folder, p) is None]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        debian_arch = cross_toolchains()[cross.host_machine].debian_arch
        options = apt_options(
            state, keyring=keyring, archive=archive, release=cross.release, arch=debian_arch
        )
        run.run_logged(["apt-get", *options, "update"], log=log, what="apt-get update")
        run.run_logged(
            ["apt-get", *options, "download",
             *(f"{p.package}:{debian_arch}={p.version}" for p in missing)],
            log=log, cwd=folder, what="apt-get download",
        )  # fmt: skip
    found = []
    for package in cross.sysroot_packages:
        deb = _deb(folder, package)
        if deb is None:
            raise ProvisionError(f"apt-get download left no {package.deb_name}_*.deb in {folder}")
        digest = sha256_file(deb)
        if digest != package.sha256:
            raise ProvisionError(
                f"{deb} has sha256 {digest}; toolchain/data/cross.toml records {package.sha256}",
                hint=f"delete {deb} to download it again",
            )
        found.append(deb)
    return found


def _deb(folder: Path, package: SysrootPackage) -> Path | None:
    return next(iter(sorted(folder.glob(f"{package.deb_name}_*.deb"))), None)


def _unpack_sysroot(sysroot: Path, debs: list[Path], *, log: Path) -> None:
    """Unpacked whole or not at all: into a folder beside it, renamed once complete."""
    stamp = "\n".join(sorted(d.name for d in debs)) + "\n"
    marker = sysroot / MARKER
    if marker.is_file() and marker.read_text() == stamp:
        return
    partial = sysroot.with_name(f".{sysroot.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for deb in debs:
        run.run_logged(["dpkg-deb", "-x", deb, partial], log=log)
    (partial / MARKER).write_text(stamp)
    shutil.rmtree(sysroot, ignore_errors=True)
    partial.rename(sysroot)


def target_torch(cross: CrossPlan, venv_python: Path, *, download_to: Path, pip_args: list[str],
                 log: Path) -> dict[str, Any]:  # fmt: skip
    """Download the target's torch (the CPU build when the sources have one), make its view,
    and write the toolchain file and the Python that answers with it."""
    wheel = _download_torch(cross, venv_python, download_to, pip_args, log=log)
    view = make_torch_view(wheel, cross.torch_view)
    include = _python_include(venv_python)
    with atomic_path(cross.toolchain_file) as temporary:
        temporary.write_text(toolchain_file_text(cross, include))
    with atomic_path(cross.target_python) as temporary:
        temporary.write_text(target_python_text(cross, venv_python))
        temporary.chmod(0o755)
    reporter.detail(
        f"{wheel.name}: torch {view.version}"
        + (f", a CUDA {view.cuda} build: its CPU view is used" if view.cuda else "")
    )
    return {"wheel": wheel.name, "sha256": sha256_file(wheel), "version": view.version,
            "cuda": view.cuda, "view": str(cross.torch_view)}  # fmt: skip


def _download_torch(
    cross: CrossPlan, venv_python: Path, folder: Path, pip_args: list[str], *, log: Path
) -> Path:
    """The CPU build from the torch index or --find-links, else PyPI's build of the version;
    a wheel downloaded before is used as it is (offline)."""
    base: list[str | Path] = [
        venv_python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--platform", cross.torch_platform, "-d", folder,
    ]  # fmt: skip
    python_tag = f"cp{cross.python_version.replace('.', '')}"
    folder.mkdir(parents=True, exist_ok=True)
    for requirement, extra in ((cross.torch_requirement, pip_args), (cross.torch_fallback, [])):
        pattern = f"torch-{requirement.split('==', 1)[1]}-{python_tag}-*_{cross.host_machine}.whl"
        if not any(folder.glob(pattern)):
            try:
                run.run_logged(
                    [*base, *extra, requirement], log=log, what=f"pip download {requirement}"
                )
            except ProcessFailedError:  # the next source is tried; the log has pip's words
                reporter.detail(f"{requirement} for {cross.torch_platform} is not to be had")
        found = sorted(folder.glob(pattern))
        if found:
            return found[-1]
    raise BuildError(
        f"no {cross.torch_requirement} or {cross.torch_fallback} wheel for "
        f"{cross.torch_platform} could be downloaded",
        hint="put one into a folder and pass --find-links FOLDER",
    )


def _python_include(venv_python: Path) -> str:
    """The build venv's CPython headers (the limited API the extensions use is the same on
    every 64-bit Linux of this version)."""
    out = run.capture(
        [venv_python, "-c", "import json, sysconfig; print(json.dumps(sysconfig.get_paths()))"],
        timeout=60,
    )
    paths = parse_json(out.stdout.strip().splitlines()[-1], where=f"{venv_python} sysconfig paths")
    return str(paths["include"])
