"""The cross toolchain file for real (issue #29): a small CMake project that links libnuma, as
vLLM's kernel library does, configured with the file the plan writes and built by Debian's aarch64
cross g++ against a sysroot made in the test, must give an aarch64 library that needs libnuma."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.plan.cross import plan_cross, toolchain_file_text

CROSS_CXX = "/usr/bin/aarch64-linux-gnu-g++-12"
EM_AARCH64 = 183

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(
        not Path(CROSS_CXX).is_file() or shutil.which("cmake") is None,
        reason=f"needs {CROSS_CXX} and cmake (apt-get install g++-12-aarch64-linux-gnu; "
        ".ci/run installs it)",
    ),
]


def test_the_toolchain_file_cross_compiles_a_library_that_links_the_sysroots_libnuma(
    tmp_path: Path,
) -> None:
    cross = plan_cross(
        build_arch="x86_64", host_arch="aarch64", work_dir=tmp_path / "work",
        build_dir=tmp_path / "build", torch_pin="2.13.0+cpu", python_version="3.11",
    )  # fmt: skip
    include, lib = cross.sysroot / "usr" / "include", cross.sysroot / "usr" / "lib" / cross.triplet
    include.mkdir(parents=True)
    lib.mkdir(parents=True)
    (include / "numa.h").write_text('extern "C" int numa_available(void);\n')
    (tmp_path / "numa.c").write_text("int numa_available(void) { return 0; }\n")
    subprocess.run(
        [cross.cc, "-shared", "-fPIC", "-Wl,-soname,libnuma.so.1", tmp_path / "numa.c",
         "-o", lib / "libnuma.so"], check=True,
    )  # fmt: skip
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(kernels CXX)\n"
        "add_library(kernels SHARED kernels.cpp)\ntarget_link_libraries(kernels numa)\n"
    )
    (project / "kernels.cpp").write_text(
        '#include <numa.h>\nextern "C" int nodes() { return numa_available(); }\n'
    )
    toolchain = tmp_path / "aarch64.cmake"
    toolchain.write_text(toolchain_file_text(cross, "/nonexistent/python-include"))
    out = tmp_path / "out"
    subprocess.run(
        ["cmake", "-S", project, "-B", out, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["cmake", "--build", out], check=True, capture_output=True)
    library = (out / "libkernels.so").read_bytes()
    assert int.from_bytes(library[18:20], "little") == EM_AARCH64
    dynamic = subprocess.run(
        ["aarch64-linux-gnu-readelf", "-d", out / "libkernels.so"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert "Shared library: [libnuma.so.1]" in dynamic
