"""Cross builds: the build machine compiles for a host machine of another architecture.

The two machines are two values of the plan: the build machine is the one running the toolkit
(`Host.build_arch`), the host machine is the one the wheel is for (the target's architecture). The
cross toolchain of a host machine (compiler, sysroot packages, wheel platform) is one table of
toolchain/data/cross.toml; this module plans with it and writes the files cmake reads.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError, PlanError
from toolchain.util.datafile import check_keys, load_toml, sha256_hex, string, string_list, table

CROSS_FILE = Path(str(resources.files("toolchain") / "data" / "cross.toml"))
CROSS_KEYS = {
    "triplet", "debian_arch", "build_arches", "release", "archive", "keyring", "gxx_version",
    "cc", "cxx", "compiler", "platform", "torch_platform", "sysroot",
}  # fmt: skip
SYSROOT_KEYS = {"package", "version", "sha256"}
# The switch the recipe's cross patch adds to vLLM's setup.py: the machine the wheel is for.
TARGET_MACHINE_SWITCH = "VLLM_CPU_TARGET_MACHINE"
# The switch the same patch adds to cpu_extension.cmake: oneDNN without the Arm Compute Library.
ACL_SWITCH = "VLLM_CPU_ARM_ACL"


@dataclass(frozen=True, kw_only=True)
class SysrootPackage:
    package: str
    version: str
    sha256: str

    @property
    def deb_name(self) -> str:
        """The file name apt-get download gives it (an epoch's ':' is written %3a)."""
        return f"{self.package}_{self.version.replace(':', '%3a')}"


@dataclass(frozen=True, kw_only=True)
class CrossToolchain:
    """One table of cross.toml: how to build for `host_arch` elsewhere."""

    host_arch: str
    triplet: str
    debian_arch: str
    build_arches: tuple[str, ...]
    release: str
    archive: str
    keyring: str
    gxx_version: str
    cc: str
    cxx: str
    compiler: tuple[str, ...]
    platform: str
    torch_platform: str
    sysroot: tuple[SysrootPackage, ...]

    @property
    def name(self) -> str:
        """The sysroot's folder name: what it holds, for which release."""
        return f"{self.host_arch}-sysroot-{self.release}"


@functools.cache
def cross_toolchains(path: Path = CROSS_FILE) -> dict[str, CrossToolchain]:
    data = load_toml(path)
    return {arch: _toolchain(arch, table(data, arch, where=str(path)), path) for arch in data}


def _toolchain(arch: str, data: dict[str, Any], path: Path) -> CrossToolchain:
    where = f"{path} [{arch}]"
    check_keys(data, CROSS_KEYS, where=where)
    fields = {
        key: string(data, key, where=where)
        for key in ("triplet", "debian_arch", "release", "archive", "keyring", "gxx_version",
                    "cc", "cxx", "platform", "torch_platform")
    }  # fmt: skip
    packages = data.get("sysroot", [])
    if not isinstance(packages, list):
        raise DataFileError(
            f"{where}: key 'sysroot' must be an array of tables ([[{arch}.sysroot]])"
        )
    return CrossToolchain(
        host_arch=arch,
        build_arches=string_list(data, "build_arches", where=where),
        compiler=string_list(data, "compiler", where=where),
        sysroot=tuple(
            _sysroot_package(entry, where=f"{where} sysroot[{i}]")
            for i, entry in enumerate(packages)
        ),
        **fields,
    )


def _sysroot_package(entry: Any, *, where: str) -> SysrootPackage:
    if not isinstance(entry, dict):
        raise DataFileError(f"{where}: must be a table")
    check_keys(entry, SYSROOT_KEYS, where=where)
    return SysrootPackage(
        package=string(entry, "package", where=where),
        version=string(entry, "version", where=where),
        sha256=sha256_hex(entry, "sha256", where=where),
    )


@dataclass(frozen=True, kw_only=True)
class CrossPlan:
    """Everything a cross build adds to the plan; the manifest records it."""

    build_machine: str
    host_machine: str
    triplet: str
    cc: str
    cxx: str
    compiler_version: str
    compiler_packages: tuple[str, ...]
    sysroot: Path
    sysroot_packages: tuple[SysrootPackage, ...]
    release: str
    toolchain_file: Path
    target_python: Path  # the build venv's Python, answering torch questions with the target's
    torch_view: Path
    torch_platform: str
    wheel_platform: str
    python_version: str  # the wheel's CPython (3.11): the target torch wheel's too
    torch_requirement: str  # the target's CPU torch, from --find-links or the torch index
    torch_fallback: str  # else PyPI's build of the same version, seen through the torch view


def toolchain_for(build_arch: str, host_arch: str) -> CrossToolchain:
    """The cross toolchain from this build machine to that host machine, or a clear refusal."""
    known = cross_toolchains()
    toolchain = known.get(host_arch)
    if toolchain is None or build_arch not in toolchain.build_arches:
        routes = ", ".join(f"{b} -> {a}" for a, t in known.items() for b in t.build_arches)
        raise PlanError(
            f"no {host_arch} wheel can be built on this {build_arch} machine: no cross "
            f"toolchain from {build_arch} to {host_arch} (known: {routes or 'none'})",
            hint=f"build on a {host_arch} machine, or on one that has a cross route",
        )
    return toolchain


def toolchain_file_text(cross: CrossPlan, python_include: str) -> str:
    """The CMake toolchain file: the host machine's system, compilers and where its files are.

    Programs are the build machine's; libraries, headers and packages may come from either side
    (torch's CMake package and CPython's headers are found by the paths given to them)."""
    sysroot_lib = cross.sysroot / "usr" / "lib" / cross.triplet
    link = " ".join(
        [f"-L{sysroot_lib}", f"-Wl,-rpath-link,{sysroot_lib}",
         f"-Wl,-rpath-link,{cross.torch_view / 'torch' / 'lib'}"]
    )  # fmt: skip
    include = f"-isystem {cross.sysroot / 'usr' / 'include'}"
    roots = " ".join(
        str(p) for p in (Path("/usr") / cross.triplet, cross.sysroot, cross.torch_view / "torch")
    )
    return "\n".join(
        [
            "# Written by vllm-cpu-builder for a cross build: "
            f"{cross.build_machine} builds for {cross.host_machine}.",
            "set(CMAKE_SYSTEM_NAME Linux)",
            f"set(CMAKE_SYSTEM_PROCESSOR {cross.host_machine})",
            f"set(CMAKE_C_COMPILER {cross.cc})",
            f"set(CMAKE_CXX_COMPILER {cross.cxx})",
            f"set(CMAKE_FIND_ROOT_PATH {roots})",
            "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)",
            f'set(CMAKE_C_FLAGS_INIT "{include}")',
            f'set(CMAKE_CXX_FLAGS_INIT "{include}")',
            "foreach(kind EXE SHARED MODULE)",
            f'  set(CMAKE_${{kind}}_LINKER_FLAGS_INIT "{link}")',
            "endforeach()",
            f'set(Torch_DIR {cross.torch_view / "torch/share/cmake/Torch"} CACHE PATH "")',
            # FindPython asks no interpreter for headers in a cross build
            f'set(Python_INCLUDE_DIR {python_include} CACHE PATH "")',
            "",
        ]
    )


def target_python_text(cross: CrossPlan, venv_python: Path) -> str:
    """vLLM's cmake asks its Python where torch is (`torch.utils.cmake_prefix_path`, torch's
    libgomp): this one answers with the torch view, and is the build venv's Python otherwise."""
    view, python = shlex.quote(str(cross.torch_view)), shlex.quote(str(venv_python))
    return (
        "#!/bin/sh\n"
        f"# the build venv's Python, with the {cross.host_machine} torch view first on its path\n"
        f'PYTHONPATH={view}${{PYTHONPATH:+:$PYTHONPATH}} exec {python} "$@"\n'
    )


def cmake_args(cross: CrossPlan) -> list[str]:
    return [
        f"-DCMAKE_TOOLCHAIN_FILE={cross.toolchain_file}",
        f"-DVLLM_PYTHON_EXECUTABLE={cross.target_python}",
    ]


def cross_env(cross: CrossPlan) -> dict[str, str]:
    """What setup.py reads in a cross build: the machine, the wheel's platform, the compilers."""
    return {
        TARGET_MACHINE_SWITCH: cross.host_machine,
        "_PYTHON_HOST_PLATFORM": cross.wheel_platform,
        "CC": cross.cc,
        "CXX": cross.cxx,
    }


def plan_cross(
    *,
    build_arch: str,
    host_arch: str,
    work_dir: Path,
    build_dir: Path,
    torch_pin: str,
    python_version: str,
) -> CrossPlan:
    """The cross part of a plan: the toolchain from the data file, every path decided here."""
    toolchain = toolchain_for(build_arch, host_arch)
    return CrossPlan(
        build_machine=build_arch,
        host_machine=host_arch,
        triplet=toolchain.triplet,
        cc=toolchain.cc,
        cxx=toolchain.cxx,
        compiler_version=toolchain.gxx_version,
        compiler_packages=toolchain.compiler,
        sysroot=work_dir / "toolchains" / toolchain.name,
        sysroot_packages=toolchain.sysroot,
        release=toolchain.release,
        toolchain_file=build_dir / f"{toolchain.triplet}.cmake",
        target_python=build_dir / "target-python",
        torch_view=build_dir / "torch-view",
        torch_platform=toolchain.torch_platform,
        wheel_platform=toolchain.platform,
        python_version=python_version,
        torch_requirement=f"torch=={torch_pin}",
        torch_fallback=f"torch=={torch_pin.split('+', 1)[0]}",
    )
