"""Cross builds (issue #29): the torch view, the toolchain file, the sysroot, auditwheel's machine.

The torch wheels here are small ones made in the test whose CMake files have the shape of the
real ones (torch 2.13.0's aarch64 CUDA wheel from PyPI and its x86_64 CPU wheel).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import platform
import sys
import zipfile
from pathlib import Path

import pytest

from toolchain.compile import auditwheel_cross
from toolchain.compile.cross import _sysroot_debs, _unpack_sysroot
from toolchain.compile.torch_view import cpu_only_cmake, make_torch_view
from toolchain.errors import ProvisionError
from toolchain.plan.cross import (
    SysrootPackage,
    cross_toolchains,
    plan_cross,
    target_python_text,
    toolchain_file_text,
)

# The shape of torch 2.13.0+cu130's Caffe2Targets.cmake (aarch64, PyPI), cut down.
CUDA_TARGETS = """\
foreach(_cmake_expected_target IN ITEMS headeronly c10_cuda c10 torch_cpu torch_cuda torch)
endforeach()

# Create imported target c10_cuda
add_library(c10_cuda SHARED IMPORTED)

set_target_properties(c10_cuda PROPERTIES
  INTERFACE_LINK_LIBRARIES "c10;torch::cudart"
)

# Create imported target c10
add_library(c10 SHARED IMPORTED)

# Create imported target torch_cpu
add_library(torch_cpu SHARED IMPORTED)

set_target_properties(torch_cpu PROPERTIES
  INTERFACE_LINK_LIBRARIES "protobuf::libprotobuf;c10"
)

# Create imported target torch_cuda
add_library(torch_cuda SHARED IMPORTED)

set_target_properties(torch_cuda PROPERTIES
  INTERFACE_LINK_LIBRARIES "torch::cudart;c10_cuda;torch_cpu_library"
)

# Create imported target torch
add_library(torch SHARED IMPORTED)

set_target_properties(torch PROPERTIES
  INTERFACE_LINK_LIBRARIES "torch_cpu_library;torch_cuda_library"
)

# Load information for each installed configuration.
file(GLOB _cmake_config_files "${CMAKE_CURRENT_LIST_DIR}/Caffe2Targets-*.cmake")
"""
CUDA_RELEASE = """\
# Import target "c10_cuda" for configuration "Release"
set_property(TARGET c10_cuda APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(c10_cuda PROPERTIES
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libc10_cuda.so"
  )

list(APPEND _cmake_import_check_targets c10_cuda )
list(APPEND _cmake_import_check_files_for_c10_cuda "${_IMPORT_PREFIX}/lib/libc10_cuda.so" )

# Import target "torch" for configuration "Release"
set_property(TARGET torch APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(torch PROPERTIES
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libtorch.so"
  )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
"""
CUDA_CONFIG = """\
if(1)
  # The file public/cuda.cmake exclusively uses CAFFE2_USE_*.
  set(CAFFE2_USE_CUDA 1)
  include("${CMAKE_CURRENT_LIST_DIR}/public/cuda.cmake")
  if(1 AND NOT CAFFE2_USE_CUDA)
    message(FATAL_ERROR "no CUDA")
  endif()
endif()

if(1)
  include("${CMAKE_CURRENT_LIST_DIR}/public/mkldnn.cmake")
endif()
"""


def torch_wheel(folder: Path, *, cuda: str | None = "13.0") -> Path:
    wheel = folder / "torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    version = "2.13.0+cu130" if cuda else "2.13.0+cpu"
    cuda_line = f"cuda: Optional[str] = '{cuda}'" if cuda else "cuda: Optional[str] = None"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/version.py", f"__version__ = '{version}'\n{cuda_line}\n")
        archive.writestr("torch/share/cmake/Torch/TorchConfig.cmake", "# torch\n")
        archive.writestr("torch/share/cmake/Caffe2/Caffe2Config.cmake", CUDA_CONFIG)
        archive.writestr("torch/share/cmake/Caffe2/Caffe2Targets.cmake", CUDA_TARGETS)
        archive.writestr("torch/share/cmake/Caffe2/Caffe2Targets-release.cmake", CUDA_RELEASE)
        archive.writestr("torch/include/ATen/ATen.h", "#pragma once\n")
        for lib in (
            "libtorch.so",
            "libtorch_cpu.so",
            "libc10.so",
            "libgomp.so.1",
            "libtorch_cuda.so",
            "libc10_cuda.so",
            "libcudnn.so.9",
            "libtorch_python.so",
        ):
            archive.writestr(f"torch/lib/{lib}", b"\x7fELF")  # fmt: skip
        archive.writestr("torch/_C.cpython-311-aarch64-linux-gnu.so", b"\x7fELF")
    return wheel


def test_the_view_of_a_cuda_wheel_has_no_cuda_target_library_or_switch(tmp_path: Path) -> None:
    view = make_torch_view(torch_wheel(tmp_path), tmp_path / "view")
    assert (view.version, view.cuda) == ("2.13.0+cu130", "13.0")
    cmake = view.torch_dir / "share" / "cmake" / "Caffe2"
    targets = (cmake / "Caffe2Targets.cmake").read_text()
    assert "cuda" not in targets.lower()
    assert "add_library(torch SHARED IMPORTED)" in targets
    assert 'INTERFACE_LINK_LIBRARIES "torch_cpu_library"' in targets
    assert "IN ITEMS headeronly c10 torch_cpu torch)" in targets
    release = (cmake / "Caffe2Targets-release.cmake").read_text()
    assert "cuda" not in release and "libtorch.so" in release
    assert release.endswith("set(CMAKE_IMPORT_FILE_VERSION)\n")  # the file's tail survives
    config = (cmake / "Caffe2Config.cmake").read_text()
    assert config.splitlines()[0] == "if(0)" and "if(0 AND NOT CAFFE2_USE_CUDA)" in config
    assert 'if(1)\n  include("${CMAKE_CURRENT_LIST_DIR}/public/mkldnn.cmake")' in config
    libs = sorted(p.name for p in (view.torch_dir / "lib").iterdir())
    assert libs == ["libc10.so", "libgomp.so.1", "libtorch.so", "libtorch_cpu.so"]
    assert (view.torch_dir / "include" / "ATen" / "ATen.h").is_file()
    assert not (view.torch_dir / "_C.cpython-311-aarch64-linux-gnu.so").exists()


def test_a_view_left_by_another_run_is_made_anew(tmp_path: Path) -> None:
    wheel = torch_wheel(tmp_path)
    view = tmp_path / "view"
    view.mkdir()
    (view / ".vcb-torch-view").write_text(wheel.name)  # a marker not written by this code
    assert make_torch_view(wheel, view).version == "2.13.0+cu130"
    assert make_torch_view(wheel, view).version == "2.13.0+cu130"  # now reused


def test_the_view_answers_vllms_torch_questions_with_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = make_torch_view(torch_wheel(tmp_path), tmp_path / "view")
    monkeypatch.syspath_prepend(str(tmp_path / "view"))
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    torch = importlib.import_module("torch")  # what `import torch; print(torch.utils...)` sees
    assert Path(torch.__file__).parent == view.torch_dir
    assert torch.utils.cmake_prefix_path == str(view.torch_dir / "share" / "cmake")
    assert torch.__version__ == "2.13.0+cu130"


def test_a_cpu_wheels_cmake_files_pass_unchanged() -> None:
    cpu_targets = CUDA_TARGETS.replace("c10_cuda ", "").replace(" torch_cuda", "")
    cpu_only = "\n\n".join(p for p in cpu_targets.split("\n\n") if "cuda" not in p.lower())
    assert cpu_only_cmake("Caffe2Targets.cmake", cpu_only) == cpu_only
    cpu_config = CUDA_CONFIG.replace("if(1)\n  # The", "if(0)\n  # The")
    assert cpu_only_cmake("Caffe2Config.cmake", cpu_config).startswith("if(0)")


def test_the_view_is_reused_and_made_anew_for_another_wheel(tmp_path: Path) -> None:
    first = make_torch_view(torch_wheel(tmp_path), tmp_path / "view")
    (first.torch_dir / "stale").write_text("")
    assert make_torch_view(torch_wheel(tmp_path), tmp_path / "view").cuda == "13.0"
    assert (first.torch_dir / "stale").exists()
    (tmp_path / "cpu").mkdir()
    cpu = torch_wheel(tmp_path / "cpu", cuda=None)
    cpu = cpu.rename(cpu.with_name("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl"))
    again = make_torch_view(cpu, tmp_path / "view")
    assert (again.version, again.cuda) == ("2.13.0+cpu", None)
    assert not (again.torch_dir / "stale").exists()


def cross_plan(tmp_path: Path):  # type: ignore[no-untyped-def]
    return plan_cross(
        build_arch="x86_64",
        host_arch="aarch64",
        work_dir=tmp_path / "work",
        build_dir=tmp_path / "build",
        torch_pin="2.13.0+cpu",
        python_version="3.11",
    )


def test_the_toolchain_file_names_the_host_machine_its_compilers_and_its_files(
    tmp_path: Path,
) -> None:
    cross = cross_plan(tmp_path)
    text = toolchain_file_text(cross, "/py/include/python3.11")
    lines = text.splitlines()
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in lines
    assert "set(CMAKE_CXX_COMPILER /usr/bin/aarch64-linux-gnu-g++-12)" in lines
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)" in lines  # the build machine's cmake
    sysroot = tmp_path / "work" / "toolchains" / "aarch64-sysroot-bookworm"
    assert f'set(CMAKE_CXX_FLAGS_INIT "-isystem {sysroot}/usr/include")' in lines
    assert f"-L{sysroot}/usr/lib/aarch64-linux-gnu" in text
    assert f"set(Torch_DIR {tmp_path}/build/torch-view/torch/share/cmake/Torch" in text
    assert 'set(Python_INCLUDE_DIR /py/include/python3.11 CACHE PATH "")' in lines


def test_the_target_python_puts_the_view_first(tmp_path: Path) -> None:
    text = target_python_text(cross_plan(tmp_path), Path("/venv/bin/python"))
    assert text.startswith("#!/bin/sh\n")
    assert f"PYTHONPATH={tmp_path}/build/torch-view${{PYTHONPATH:+:$PYTHONPATH}}" in text
    assert text.rstrip().endswith('exec /venv/bin/python "$@"')


def test_the_data_file_pins_each_sysroot_package_by_hash() -> None:
    aarch64 = cross_toolchains()["aarch64"]
    assert aarch64.build_arches == ("x86_64",)
    assert {p.package for p in aarch64.sysroot} == {"libnuma-dev", "libnuma1"}
    assert all(len(p.sha256) == 64 for p in aarch64.sysroot)


def test_sysroot_debs_already_there_are_checked_offline(tmp_path: Path) -> None:
    cross = cross_plan(tmp_path)
    folder = tmp_path / "state" / "debs"
    folder.mkdir(parents=True)
    debs = {}
    for package in cross.sysroot_packages:
        debs[package.package] = folder / f"{package.deb_name}_arm64.deb"
        debs[package.package].write_bytes(b"not the real package")
    pinned = tuple(
        SysrootPackage(package=p.package, version=p.version,
                       sha256=hashlib.sha256(b"not the real package").hexdigest())
        for p in cross.sysroot_packages
    )  # fmt: skip
    log = tmp_path / "log"
    # no apt-get: starting a process would fail the test
    found = _sysroot_debs(
        dataclasses.replace(cross, sysroot_packages=pinned), tmp_path / "state", "k", "a", log=log
    )
    assert sorted(found) == sorted(debs.values())
    with pytest.raises(ProvisionError, match=r"toolchain/data/cross\.toml records"):
        _sysroot_debs(cross, tmp_path / "state", "k", "a", log=tmp_path / "log")


def test_an_unpacked_sysroot_is_kept_while_its_debs_are_the_same(tmp_path: Path) -> None:
    sysroot = tmp_path / "sysroot"
    sysroot.mkdir()
    (sysroot / ".vcb-sysroot").write_text("libnuma1_2.0.16-1_arm64.deb\n")
    (sysroot / "kept").write_text("")
    _unpack_sysroot(sysroot, [Path("/debs/libnuma1_2.0.16-1_arm64.deb")], log=tmp_path / "log")
    assert (sysroot / "kept").exists()  # dpkg-deb did not run (it would fail the test)


def test_auditwheel_is_told_the_wheels_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_main() -> int:
        seen["machine"], seen["argv"] = platform.machine(), list(sys.argv)
        return 0

    import auditwheel.main

    monkeypatch.setattr(auditwheel.main, "main", fake_main)
    monkeypatch.setattr(platform, "machine", platform.machine)
    monkeypatch.setattr(sys, "argv", ["auditwheel_cross", "aarch64", "repair", "x.whl"])
    assert auditwheel_cross.main() == 0
    assert seen == {"machine": "aarch64", "argv": ["auditwheel_cross", "repair", "x.whl"]}
