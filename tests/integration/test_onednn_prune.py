"""Leaving out the oneDNN units a kernel library never links, on a tiny CMake project shaped
like vLLM's: a `oneDNN` subproject whose object library becomes a static archive that a shared
kernel library links."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.conftest import CMAKE_PROJECT_MARKS
from toolchain.compile.onednn_prune import learn
from toolchain.plan.switches import FORGET, PRUNE_CMAKE

pytestmark = CMAKE_PROJECT_MARKS

PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.20)\nproject(kernels CXX)\n"
    "add_subdirectory(onednn)\nadd_library(kern SHARED kern.cpp)\n"
    "target_link_libraries(kern PRIVATE dnnl)\n",
    "kern.cpp": "int used();\nint kernel() { return used(); }\n",
    "onednn/CMakeLists.txt": "project(oneDNN CXX)\nadd_subdirectory(src)\n",
    "onednn/src/CMakeLists.txt": "add_library(dnnl_cpu OBJECT used.cpp unused.cpp x64/jit.cpp)\n"
    "set_target_properties(dnnl_cpu PROPERTIES POSITION_INDEPENDENT_CODE ON)\n"
    "add_library(dnnl STATIC $<TARGET_OBJECTS:dnnl_cpu>)\n",
    "onednn/src/used.cpp": "int used() { return 7; }\n",
    "onednn/src/unused.cpp": "int unused() { return 8; }\n",
    "onednn/src/x64/jit.cpp": "int jit() { return 9; }\n",
}


def _configure(source: Path, build: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["cmake", "-S", source, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", *extra],
        capture_output=True, text=True,
    )  # fmt: skip


def _objects(build: Path) -> list[str]:
    return sorted(p.name for p in build.rglob("*.o"))


def test_the_units_a_library_never_links_are_listed_and_left_out(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for name, text in PROJECT.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    full = tmp_path / "full"
    assert _configure(source, full).returncode == 0
    subprocess.run(["ninja", "-C", full], check=True, capture_output=True)

    learned = learn(full)  # finds libkern.so itself: the one library that links libdnnl.a
    assert learned.libraries == ("libkern.so",)
    unused = list(learned.left_out)
    assert unused == ["dnnl_cpu unused.cpp", "dnnl_cpu x64/jit.cpp"]

    listed = tmp_path / "skip.txt"
    listed.write_text("# made by the test\n" + "\n".join(unused) + "\n")
    lean = tmp_path / "lean"
    done = _configure(
        source, lean, f"-DCMAKE_PROJECT_oneDNN_INCLUDE={PRUNE_CMAKE}", f"-DVCB_ONEDNN_SKIP={listed}"
    )
    assert done.returncode == 0, done.stderr
    assert "left out 2 oneDNN units" in done.stdout
    subprocess.run(["ninja", "-C", lean], check=True, capture_output=True)
    assert _objects(lean) == ["kern.cpp.o", "used.cpp.o"]
    assert (lean / "libkern.so").read_bytes() == (full / "libkern.so").read_bytes()

    listed.write_text("dnnl_cpu unused.cpp\ndnnl_cpu gone.cpp\n")  # made for another oneDNN
    stale = _configure(
        source, tmp_path / "stale", f"-DCMAKE_PROJECT_oneDNN_INCLUDE={PRUNE_CMAKE}",
        f"-DVCB_ONEDNN_SKIP={listed}",
    )  # fmt: skip
    assert stale.returncode != 0
    assert "lists 1 unit(s) this oneDNN does not build, e.g. 'dnnl_cpu gone.cpp'" in " ".join(
        stale.stderr.split()
    )


def test_a_build_folder_planned_without_the_list_again_compiles_every_unit(
    tmp_path: Path,
) -> None:
    """vLLM reconfigures a reused build folder on its CMakeCache.txt: a plan without a list (the
    recipe dropped it, or an unpruned build to compare with) unsets what the earlier plan set."""
    source = tmp_path / "src"
    for name, text in PROJECT.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    listed = tmp_path / "skip.txt"
    listed.write_text("dnnl_cpu unused.cpp\n")
    build = tmp_path / "build"
    prune = (f"-DCMAKE_PROJECT_oneDNN_INCLUDE={PRUNE_CMAKE}", f"-DVCB_ONEDNN_SKIP={listed}")
    assert "left out 1 oneDNN units" in _configure(source, build, *FORGET, *prune).stdout
    again = _configure(source, build, *FORGET)
    assert again.returncode == 0, again.stderr
    assert "left out" not in again.stdout
    subprocess.run(["ninja", "-C", build], check=True, capture_output=True)
    assert "unused.cpp.o" in _objects(build)
    # without the unsetting, the cache keeps pruning
    stale = tmp_path / "stale"
    _configure(source, stale, *prune)
    assert "left out 1 oneDNN units" in _configure(source, stale).stdout
