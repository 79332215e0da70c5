"""How vLLM's libraries compile (toolchain/data/vllm-libraries.cmake): their optimisation level,
the lean <torch/all.h> and torch's headers precompiled once per kernel library; and ccache
compiling what it preprocessed. On a tiny CMake project named as vLLM's top project: two kernel
libraries that include a `torch/all.h`, a helper library that does not, and a library in a
subfolder (as oneDNN's are)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import CMAKE_PROJECT_MARKS
from toolchain.plan.cache import LAUNCHER_CCACHE, NO_SECOND_CPP, PCH_SLOPPINESS
from toolchain.plan.switches import FORGET, LIBRARIES_CMAKE, TORCH_LEAN

pytestmark = CMAKE_PROJECT_MARKS

PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.20)\nproject(vllm_extensions CXX)\n"
    "add_library(helper STATIC helper.cpp)\n"
    "foreach(tier IN ITEMS _C _C_AVX2)\n"
    "  add_library(${tier} SHARED ops.cpp more_ops.cpp)\n"
    "  target_include_directories(${tier} PRIVATE include)\n"
    "endforeach()\n"
    "target_compile_options(_C_AVX2 PRIVATE -mavx2)\n"
    "add_library(_C_ALIAS ALIAS _C)\nadd_library(_C_HEADERS INTERFACE)\n"
    # as vLLM's cpu_extension.cmake adds oneDNN's folder: built Release whatever the build type
    "set(saved ${CMAKE_BUILD_TYPE})\nset(CMAKE_BUILD_TYPE Release)\n"
    "add_subdirectory(onednn)\nset(CMAKE_BUILD_TYPE ${saved})\n",
    "include/torch/all.h": "#pragma once\n#include <map>\n#include <string>\n#include <vector>\n"
    "#include <torch/types.h>\n#include <torch/library.h>\n#include <torch/utils.h>\n"
    "#include <torch/version.h>\n"
    "#include <torch/nn.h>\n",
    # torch's headers as the lean all.h includes them; nn.h stands for what it leaves out
    "include/torch/types.h": "#pragma once\ninline int torch_like() { return 3; }\n",
    "include/torch/library.h": "#pragma once\n",
    "include/torch/utils.h": "#pragma once\n",
    "include/torch/version.h": "#pragma once\n",
    "include/torch/nn.h": "#pragma once\nint torch_nn_was_compiled();\n",
    "ops.cpp": "#include <torch/all.h>\nint op() { return torch_like(); }\n",
    "more_ops.cpp": "#include <torch/all.h>\nint more_op() { return torch_like() + 1; }\n",
    "helper.cpp": "int helper() { return 5; }\n",
    "onednn/CMakeLists.txt": "add_library(dnnl STATIC dnnl.cpp)\n",
    "onednn/dnnl.cpp": "int dnnl() { return 7; }\n",
}
INCLUDE = f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={LIBRARIES_CMAKE}"
LEAN = (INCLUDE, f"-DVCB_TORCH_LEAN={TORCH_LEAN}")
PCH = (
    INCLUDE,
    # not defined, an alias and an interface library: passed over
    "-DVCB_PCH_TARGETS=_C,_C_AVX2,_C_AVX512,_C_ALIAS,_C_HEADERS",
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    for name, text in PROJECT.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def _configure(
    source: Path,
    build: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    build_type: str = "Release",
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["cmake", "-S", source, "-B", build, "-G", "Ninja", f"-DCMAKE_BUILD_TYPE={build_type}",
         *extra],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def _deps(build: Path) -> str:
    """The headers each output was compiled from, as ninja recorded them."""
    return subprocess.run(
        ["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True, check=True
    ).stdout


def _commands(build: Path) -> list[str]:
    return subprocess.run(
        ["ninja", "-C", build, "-t", "commands"], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def _unit(commands: list[str], name: str) -> str:
    (unit,) = (c for c in commands if f"CMakeFiles/{name}.cpp.o -c " in c)
    return unit


@pytest.mark.parametrize(
    ("build_type", "level", "flags"),
    [("Release", "-O2", "-O2 -DNDEBUG"), ("RelWithDebInfo", "-O3", "-O3 -g -DNDEBUG")],
)
def test_the_top_folders_libraries_compile_at_the_planned_level_and_a_subfolders_at_its_own(
    source: Path, tmp_path: Path, build_type: str, level: str, flags: str
) -> None:
    build = tmp_path / "build"
    configured = _configure(
        source, build, *FORGET, INCLUDE, f"-DVCB_OPT_LEVEL={level}", build_type=build_type
    )
    assert f"vllm-cpu-builder: {level} for vLLM's libraries: " in configured.stdout
    commands = _commands(build)
    own = "-O3 -DNDEBUG" if build_type == "Release" else "-O2 -g -DNDEBUG"
    for name in ("_C.dir/ops", "_C_AVX2.dir/more_ops", "helper.dir/helper"):
        unit = _unit(commands, name)
        assert f" {flags} " in unit and own not in unit
    # oneDNN's libraries, in a subfolder configured as Release, keep Release's flags
    assert " -O3 -DNDEBUG " in _unit(commands, "dnnl.dir/dnnl")
    # and a folder planned without a level gets CMake's own again
    again = _configure(source, build, *FORGET, build_type=build_type)
    assert "for vLLM's libraries" not in again.stdout
    assert f" {own} " in _unit(_commands(build), "_C.dir/ops")


def test_every_library_of_the_top_folder_gets_the_lean_header_first(
    source: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build"
    configured = _configure(source, build, *FORGET, *LEAN)
    assert "vllm-cpu-builder: lean <torch/all.h> for helper,_C,_C_AVX2\n" in configured.stdout
    commands = _commands(build)
    for name in ("_C.dir/ops", "_C_AVX2.dir/more_ops"):
        unit = _unit(commands, name)
        assert unit.index(f"-I{TORCH_LEAN} ") < unit.index(f"-I{source}/include")
    assert any(f"-I{TORCH_LEAN} " in c for c in commands if "helper.dir/" in c)
    assert not any(str(TORCH_LEAN) in c for c in commands if "dnnl.dir/" in c)
    built = subprocess.run(["ninja", "-C", build, "-v"], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout
    # the units compiled torch's types.h, not its nn.h
    deps = _deps(build)
    assert "torch/types.h" in deps and "torch/nn.h" not in deps
    # and with the header precompiled as well, the precompiled one is the lean one
    again = _configure(source, build, *FORGET, *LEAN, "-DVCB_PCH_TARGETS=_C")
    assert "precompiled for _C\n" in again.stdout
    assert subprocess.run(["ninja", "-C", build], capture_output=True).returncode == 0
    deps = _deps(build)
    assert f"{TORCH_LEAN}/torch/all.h" in deps and "torch/nn.h" not in deps


def test_each_listed_kernel_library_precompiles_the_header_and_its_units_use_it(
    source: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build"
    configured = _configure(source, build, *FORGET, *PCH)
    assert "<torch/all.h> precompiled for _C,_C_AVX2\n" in configured.stdout
    commands = _commands(build)
    for tier in ("_C", "_C_AVX2"):
        pch = f"-include {build}/CMakeFiles/{tier}.dir/cmake_pch.hxx"
        units = [c for c in commands if f" -o CMakeFiles/{tier}.dir/" in c and ".cpp.o -c " in c]
        assert len(units) == 2 and all(pch in c for c in units)
    assert not any("cmake_pch" in c for c in commands if "helper.dir/" in c)
    # the AVX2 library's header is compiled with its own flags, or GCC would refuse it
    assert any("-mavx2" in c and "_C_AVX2.dir/cmake_pch.hxx.gch" in c for c in commands)
    built = subprocess.run(["ninja", "-C", build, "-v"], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout
    assert (build / "CMakeFiles" / "_C_AVX2.dir" / "cmake_pch.hxx.gch").is_file()


OWN_FIRST = {
    # torch's headers first, through a guarded header of the library's own: precompiled
    "guarded.cpp": '#include "guarded.h"\nint guarded() { return torch_like(); }\n',
    "include/guarded.h": "#ifndef GUARDED_H\n#define GUARDED_H\n#include <vector>\n"
    "#include <torch/all.h>\n#endif\n",
    # as 0.32's sgl-kernels/moe.cpp: a macro of its own before torch's headers
    "capability.cpp": '#include "vec.h"\nint capability() { return torch_like(); }\n',
    "vec.h": "#pragma once\n#if defined(__x86_64__)\n#define CPU_CAPABILITY_AVX512\n#endif\n"
    "#include <torch/types.h>\n",
    "pragma.cpp": '#pragma GCC optimize("O1")\n#include <torch/all.h>\n'
    "int pragma() { return torch_like(); }\n",
    "lost.cpp": '#include "nowhere.h"\n#include <torch/all.h>\n',
    "no_torch.cpp": "#include <vector>\nint no_torch() { return 1; }\n",
}


def test_a_unit_that_does_something_before_torchs_headers_compiles_them_itself(
    source: Path, tmp_path: Path
) -> None:
    for name, text in OWN_FIRST.items():
        (source / name).write_text(text)
    with (source / "CMakeLists.txt").open("a") as cmake:
        cmake.write(f"add_library(_C_OWN SHARED {' '.join(n for n in OWN_FIRST if '.cpp' in n)})\n")
        cmake.write("target_include_directories(_C_OWN PRIVATE include)\n")
    build = tmp_path / "build"
    configured = _configure(source, build, *FORGET, INCLUDE, "-DVCB_PCH_TARGETS=_C,_C_OWN")
    assert "<torch/all.h> precompiled for _C,_C_OWN\n" in configured.stdout
    said = "vllm-cpu-builder: _C_OWN's {} compiles torch's headers itself: {}\n"
    for unit, why in [
        ("capability.cpp", "#define CPU_CAPABILITY_AVX512 (vec.h)"),
        ("pragma.cpp", '#pragma GCC optimize("O1") (pragma.cpp)'),
        ("lost.cpp", '#include "nowhere.h" (lost.cpp), not found'),
        ("no_torch.cpp", "it does not include torch's headers"),
    ]:
        assert said.format(unit, why) in configured.stdout
    assert configured.stdout.count("compiles torch's headers itself") == 4
    commands = _commands(build)
    pch = f"-include {build}/CMakeFiles/_C_OWN.dir/cmake_pch.hxx"
    assert pch in _unit(commands, "_C_OWN.dir/guarded")
    for unit in ("capability", "pragma", "lost", "no_torch"):
        assert pch not in _unit(commands, f"_C_OWN.dir/{unit}")
    assert pch.replace("_C_OWN", "_C") in _unit(commands, "_C.dir/ops")


def test_a_build_folder_planned_without_them_compiles_torchs_own_header_in_each_unit(
    source: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build"
    _configure(source, build, *FORGET, *PCH)
    again = _configure(source, build, *FORGET)
    assert "precompiled for" not in again.stdout
    assert not any("cmake_pch" in c for c in _commands(build))
    _configure(source, build, *FORGET, *LEAN)
    full = _configure(source, build, *FORGET)
    assert "lean <torch/all.h>" not in full.stdout
    assert not any(str(TORCH_LEAN) in c for c in _commands(build))


@pytest.mark.skipif(not shutil.which("ccache"), reason="needs ccache")
@pytest.mark.parametrize(("sloppiness", "hits"), [(PCH_SLOPPINESS, 6), ({}, 0)])
def test_ccache_caches_the_units_only_with_the_plans_sloppiness(
    source: Path, tmp_path: Path, sloppiness: dict[str, str], hits: int
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CCACHE_")},
        "CCACHE_DIR": str(tmp_path / "ccache"),
        **sloppiness,
    }
    launcher = [f"-D{name}={value}" for name, value in LAUNCHER_CCACHE.items()]
    build = tmp_path / "build"
    _configure(source, build, *PCH, *launcher, env=env)
    for _ in range(2):  # a cold build, then the same again from a clean folder
        for clean in (("-t", "clean"), ()):
            subprocess.run(["ninja", "-C", build, *clean], env=env, check=True, capture_output=True)
    stats = subprocess.run(
        ["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True
    ).stdout
    counted = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    # two headers and four units per build; the helper's and the subfolder library's units have
    # no precompiled header
    assert int(counted["direct_cache_hit"]) + int(counted["preprocessed_cache_hit"]) == hits + 2


@pytest.mark.skipif(not shutil.which("ccache"), reason="needs ccache")
@pytest.mark.parametrize("build_type", ["Release", "RelWithDebInfo"])
def test_ccache_compiles_what_it_preprocessed_into_the_same_objects(
    source: Path, tmp_path: Path, build_type: str
) -> None:
    """The plan's ccache setting: on a miss the compiler gets ccache's preprocessed unit, not
    the source to preprocess again, and makes the same objects, debug info included."""
    objects = {}
    build = tmp_path / "build"  # one folder, as a rebuild has: the debug info names it
    for name, setting in (("second_cpp", {}), ("preprocessed", NO_SECOND_CPP)):
        log = tmp_path / f"{name}.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CCACHE_")},
            "CCACHE_DIR": str(tmp_path / f"{name}-ccache"),
            "CCACHE_LOGFILE": str(log),
            **setting,
        }
        launcher = [f"-D{key}={value}" for key, value in LAUNCHER_CCACHE.items()]
        shutil.rmtree(build, ignore_errors=True)
        _configure(source, build, *LEAN, *launcher, env=env, build_type=build_type)
        subprocess.run(["ninja", "-C", build], env=env, check=True, capture_output=True)
        # ccache's log names what it hands the compiler: its preprocessed .ii, or the source
        lines = log.read_text().splitlines()
        compiled = [line for line in lines if "Executing " in line and " -c " in line]
        assert len(compiled) == 6
        assert all(line.endswith(".ii") == bool(setting) for line in compiled)
        objects[name] = {
            path.relative_to(build): path.read_bytes() for path in build.rglob("*.cpp.o")
        }
    assert len(objects["preprocessed"]) == 6
    assert objects["preprocessed"] == objects["second_cpp"]
