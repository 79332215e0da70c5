"""What vLLM's libraries compile of torch's headers (toolchain/data/kernel-headers.cmake): the
lean <torch/all.h> and torch's headers precompiled once per kernel library. On a tiny CMake
project named as vLLM's top project: two kernel libraries that include a `torch/all.h`, a helper
library that does not, and a library in a subfolder (as oneDNN's are)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import CMAKE_PROJECT_MARKS
from toolchain.plan.cache import LAUNCHER_CCACHE, PCH_SLOPPINESS
from toolchain.plan.switches import FORGET, HEADERS_CMAKE, TORCH_LEAN

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
    "add_subdirectory(onednn)\n",
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
INCLUDE = f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={HEADERS_CMAKE}"
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
    source: Path, build: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["cmake", "-S", source, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", *extra],
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


def test_every_library_of_the_top_folder_gets_the_lean_header_first(
    source: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build"
    configured = _configure(source, build, *FORGET, *LEAN)
    assert "vllm-cpu-builder: lean <torch/all.h> for helper,_C,_C_AVX2\n" in configured.stdout
    commands = _commands(build)
    for name in ("_C.dir/ops", "_C_AVX2.dir/more_ops"):
        (unit,) = (c for c in commands if f"CMakeFiles/{name}.cpp.o -c " in c)
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
