"""Build plans for the fixture machines: targets, Python, compiler, jobs and the bad inputs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from toolchain.cli import main
from toolchain.detect.host import Host, detect_host
from toolchain.detect.memory import Memory
from toolchain.errors import PlanError
from toolchain.plan.planner import BuildOptions, plan_build
from toolchain.plan.recipes import known_versions, load_recipe
from toolchain.plan.render import render_plan
from toolchain.plan.switches import LIBRARIES_CMAKE, TORCH_LEAN, lean_header_dir
from toolchain.util.compile_cache import parse_cache
from toolchain.util.units import GIB

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PY311 = "/opt/python3.11"
# tarfile's extraction filters came with Python 3.11.4; Debian 12's python3 is 3.11.2
SAFE_EXTRACT = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
# the build settings with --no-precompiled-headers given
IN_EACH_UNIT = {**BuildOptions().settings, "precompiled_headers": False}
FULL_TORCH_HEADERS = {**BuildOptions().settings, "torch_headers": "full"}


@pytest.fixture
def host_of(fake_programs) -> Callable[..., Host]:
    """A saved machine with a g++ 12.2 (Debian 12's) and ccache on its PATH."""
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("ccache", "ccache version 4.7.5\n")
    fake_programs.add("python3.11", "")
    fake_programs.add("python3.12", "")

    def make(
        name: str,
        *,
        cpus: int = 2,
        total_gib: float = 24,
        available_gib: float = 22,
        build_arch: str | None = None,
    ) -> Host:
        """The saved machine builds for itself unless `build_arch` names another build machine."""
        host = detect_host(cpuinfo_file=FIXTURES / "cpuinfo" / f"{name}.txt")
        memory = Memory(total_bytes=int(total_gib * GIB), available_bytes=int(available_gib * GIB))
        return dataclasses.replace(
            host, cpus_usable=cpus, memory=memory, build_arch=build_arch or host.arch
        )

    return make


def plan(host: Host, version: str = "0.32.0", **options: object):  # type: ignore[no-untyped-def]
    return plan_build(host, load_recipe(RECIPES, version), BuildOptions(**options))  # type: ignore[arg-type]


def test_seed_vm_gets_one_job_not_32_or_6(host_of: Callable[..., Host]) -> None:
    # flat sizing: 0.16.0 has no measured model (test_job_pools.py has 0.32.0's pools)
    host = host_of("x86-haswell", cpus=6, total_gib=7.75, available_gib=4.66)
    result = plan(host, "0.16.0")
    assert result.max_jobs == 1
    assert result.jobs.limited_by == "memory"
    assert result.env["MAX_JOBS"] == "1" and result.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "1"


def test_seed_vm_from_saved_meminfo(host_of: Callable[..., Host]) -> None:
    host = detect_host(
        cpuinfo_file=FIXTURES / "cpuinfo" / "x86-haswell.txt",
        meminfo_file=FIXTURES / "meminfo" / "seed-6cpu-7.75g.txt",
    )
    assert plan(dataclasses.replace(host, cpus_usable=6), "0.16.0").max_jobs == 1


@pytest.mark.parametrize(
    ("cpus", "available", "jobs", "by"),
    [(2, 22, 2, "cpus"), (64, 24, 6, "memory"), (1, 22, 1, "cpus")],
)
def test_jobs_are_the_lesser_of_cpus_and_memory(
    host_of: Callable[..., Host], cpus: int, available: float, jobs: int, by: str
) -> None:
    result = plan(host_of("x86-zen4", cpus=cpus, available_gib=available), "0.16.0")
    assert (result.max_jobs, result.jobs.limited_by) == (jobs, by)


def test_too_little_memory_for_one_job_says_how_much_is_needed(
    host_of: Callable[..., Host],
) -> None:
    with pytest.raises(PlanError, match=r"one compile job needs 4\.2 GiB .* only 3\.0 GiB"):
        plan(host_of("x86-zen4", available_gib=3))


def test_overcommitting_override_is_warned_with_the_peak(host_of: Callable[..., Host]) -> None:
    result = plan(host_of("x86-zen4", cpus=8, available_gib=8), jobs=8)
    assert result.max_jobs == 8
    assert any("MAX_JOBS=8 can need 30.4 GiB at its peak" in w for w in result.warnings)
    assert not any("MAX_JOBS" in w for w in plan(host_of("x86-zen4"), jobs=2).warnings)


@pytest.mark.parametrize(
    ("machine", "version", "target"),
    [
        ("x86-sapphirerapids", "0.16.0", "amx"),
        ("x86-zen4", "0.16.0", "avx512bf16"),
        ("x86-cascadelake", "0.16.0", "avx512vnni"),
        ("x86-skylake-avx512", "0.16.0", "avx512"),
        ("x86-haswell", "0.16.0", "avx2"),
        ("x86-alderlake", "0.16.0", "avx2"),
        ("x86-sapphirerapids", "0.32.0", "portable"),
        ("x86-haswell", "0.34.0", "portable"),
        # 0.32 on Arm (the arm-tiers patch): one wheel for every Arm CPU, as on x86
        ("arm-graviton2", "0.32.0", "portable"),
        ("arm-graviton3", "0.32.0", "portable"),
        ("arm-neoverse-v2", "0.32.0", "portable"),
        ("arm-asahi-m1", "0.32.0", "portable"),
        # eras without it: the richest target the host builds and runs
        ("arm-graviton2", "0.33.0", "neon"),
        ("arm-graviton3", "0.33.0", "bf16i8mm"),
        ("arm-neoverse-v2", "0.34.0", "bf16i8mm"),
        ("arm-asahi-m1", "0.33.0", "neon"),
        ("arm-graviton3", "0.16.0", "bf16"),
    ],
)
def test_default_target_is_the_best_this_host_builds_and_runs(
    host_of: Callable[..., Host], machine: str, version: str, target: str
) -> None:
    result = plan(host_of(machine), version)
    assert result.target_isa == target
    assert result.wheel_version == f"{version}+cpu.{target}"
    assert Version(result.wheel_version).local.startswith("cpu")  # type: ignore[union-attr]
    assert result.warnings == () or all("lacks" not in w for w in result.warnings)


def test_pre_0_17_switches_reach_the_environment(host_of: Callable[..., Host]) -> None:
    env = plan(host_of("x86-sapphirerapids"), "0.16.0").env
    assert env["VLLM_CPU_AVX512BF16"] == "1" and env["VLLM_CPU_AMXBF16"] == "1"
    assert (
        plan(host_of("x86-zen4"), "0.16.0", target="avx2").env["VLLM_CPU_DISABLE_AVX512"] == "true"
    )
    assert not any(key.startswith("VLLM_CPU_") for key in plan(host_of("x86-zen4")).env)


BF16_I8MM = {"VLLM_CPU_ARM_BF16": "1", "VLLM_CPU_ARM_I8MM": "1"}


@pytest.mark.parametrize(
    ("machine", "version", "target", "switches"),
    [
        ("arm-graviton2", "0.32.0", "neon", {}),
        ("arm-graviton2", "0.32.0", "bf16", {"VLLM_CPU_ARM_BF16": "1"}),
        ("arm-graviton3", "0.32.0", "bf16i8mm", BF16_I8MM),
        ("arm-neoverse-v2", "0.34.0", "bf16i8mm", BF16_I8MM),
        ("arm-graviton2", "0.16.0", "neon", {}),
        ("arm-graviton3", "0.16.0", "bf16", {}),  # before 0.17: BF16 only from the host's cpuinfo
    ],
)  # fmt: skip
def test_every_arm_target_of_every_era_gets_its_switches_and_the_acl_job_cap(
    host_of: Callable[..., Host], machine: str, version: str, target: str, switches: dict[str, str]
) -> None:
    result = plan(host_of(machine, cpus=64), version, target=target)
    assert {k: v for k, v in result.env.items() if k.startswith("VLLM_CPU_")} == switches
    assert "vllm-cpu-acl-max-jobs.patch" in [p.file.name for p in result.patches]
    assert result.env["MAX_JOBS"] == str(result.max_jobs) and result.max_jobs < 64
    assert any(d.name == "ComputeLibrary" for d in result.third_party)


def test_the_acl_patch_is_for_arm_builds_only(host_of: Callable[..., Host]) -> None:
    names = [p.file.name for p in plan(host_of("x86-zen4")).patches]
    assert names == ["vllm-0.32-cpu-slot-mapping-fallback.patch", "vllm-cpu-x86-tiers.patch"]


def test_cross_target_is_allowed_but_warned(host_of: Callable[..., Host]) -> None:
    result = plan(host_of("x86-zen4"), "0.16.0", target="amx")
    assert result.min_isa[-2:] == ("amx_bf16", "amx_tile")
    assert any("lacks amx_bf16, amx_tile" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("machine", "version", "target", "message"),
    [
        ("x86-zen4", "0.32.0", "amx", "builds the targets portable, avx2, avx512, avx512bf16; "),
        ("x86-zen4", "0.16.0", "neon", "needs vLLM 0.16.0 to read VLLM_CPU_TARGET_MACHINE"),
        ("arm-graviton3", "0.33.0", "portable", "no cross toolchain from aarch64 to x86_64"),
        ("arm-graviton3", "0.32.0", "avx2", "no x86_64 wheel can be built on this aarch64 machine"),
        ("arm-graviton3", "0.32.0", "sve", "the targets portable, neon, bf16, bf16i8mm; not 'sve'"),
        ("arm-graviton3", "0.33.0", "sve", "builds the targets neon, bf16, bf16i8mm; not 'sve'"),
        (
            "x86-zen4",
            "0.16.0",
            "avx512",
            "turns on avx512_bf16, avx512_vnni whenever the build host's /proc/cpuinfo lists them",
        ),
        ("arm-graviton3", "0.32.0", "neon", "turns on bf16, i8mm"),
        ("arm-graviton2", "0.16.0", "bf16", "takes bf16 only from the build host"),
    ],
)
def test_targets_the_era_or_host_cannot_build(
    host_of: Callable[..., Host], machine: str, version: str, target: str, message: str
) -> None:
    with pytest.raises(PlanError) as caught:
        plan(host_of(machine), version, target=target)
    assert message in caught.value.message


def test_python_outside_the_recipe_range(host_of: Callable[..., Host]) -> None:
    with pytest.raises(PlanError, match=r"needs Python <3\.15,>=3\.11; 3\.10 is outside"):
        plan(host_of("x86-zen4"), python="3.10")
    with pytest.raises(PlanError, match=r"python3\.13 is not on PATH"):
        plan(host_of("x86-zen4"), python="3.13")
    assert plan(host_of("x86-zen4"), python="3.12").python.version == "3.12"
    assert plan(host_of("x86-zen4")).python.version == "3.11"


def test_accepting_a_cuda_torch_pins_the_public_version(host_of: Callable[..., Host]) -> None:
    assert plan(host_of("x86-zen4")).torch.requirement == "torch==2.13.0+cpu"
    accepting = plan(host_of("x86-zen4"), allow_cuda_torch=True)
    assert accepting.torch.requirement == "torch==2.13.0"


def test_a_shared_cache_plans_sccache_with_ccache_as_the_fallback(
    host_of: Callable[..., Host],
) -> None:
    result = plan(host_of("x86-zen4"), cache=parse_cache("redis://cache.farm:6379"))
    assert result.env["SCCACHE_REDIS_ENDPOINT"] == "redis://cache.farm:6379"
    assert result.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "sccache"
    assert len(result.env["SCCACHE_SERVER_UDS"]) < 100, "a socket path must be short"
    assert "CCACHE_DIR" in result.env  # for the fallback when the cache cannot be reached
    steps = [s.name for s in result.steps]
    assert steps[steps.index("install-build-requirements") + 1] == "start-cache"
    assert result.to_json()["shared_cache"]["backend"] == "redis"
    assert "start-cache" not in [s.name for s in plan(host_of("x86-zen4")).steps]


def test_ccache_is_the_launcher_even_when_sccache_is_on_path(
    host_of: Callable[..., Host], fake_programs
) -> None:
    """A local sccache compiles in its own server, outside the build's processes, so the
    compile's CPU-seconds and unit memory would go unmeasured: ccache is taken, and vLLM's
    setup.py (which takes any sccache on PATH) is told not to."""
    fake_programs.add("sccache", "sccache 0.16.0\n")
    both = plan(host_of("x86-zen4"))
    assert both.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert both.env["VLLM_DISABLE_SCCACHE"] == "1"
    assert not any("sccache" in w for w in both.warnings)
    (fake_programs.folder / "ccache").unlink()
    alone = plan(host_of("x86-zen4"))
    assert alone.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "sccache"
    assert "VLLM_DISABLE_SCCACHE" not in alone.env and "CCACHE_DIR" not in alone.env
    assert any("CPU-seconds and each unit's memory go unmeasured" in w for w in alone.warnings)


def test_sccache_is_switched_off_when_only_the_build_venv_may_have_one(
    host_of: Callable[..., Host], fake_programs
) -> None:
    """A --cache build installs sccache into the build venv, which the next build of the same
    folder reuses first on the compile's PATH: vLLM's setup.py would take it over ccache."""
    (fake_programs.folder / "sccache").unlink(missing_ok=True)
    ccache_only = plan(host_of("x86-zen4"))
    assert ccache_only.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert ccache_only.env["VLLM_DISABLE_SCCACHE"] == "1"
    (fake_programs.folder / "ccache").unlink()
    neither = plan(host_of("x86-zen4"))
    assert "CMAKE_CXX_COMPILER_LAUNCHER" not in neither.env
    assert neither.env["VLLM_DISABLE_SCCACHE"] == "1"


def test_vllms_libraries_get_the_lean_torch_header_unless_asked_for_torchs_own(
    host_of: Callable[..., Host],
) -> None:
    zen4 = host_of("x86-zen4")
    default = plan(zen4, target="portable")
    args = default.env["CMAKE_ARGS"].split()
    assert default.torch_headers == "lean"
    assert f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={LIBRARIES_CMAKE}" in args
    # the compile step writes the header into the build folder, where ccache's base dir is
    lean = lean_header_dir(default.paths.recipe_files)
    assert f"-DVCB_TORCH_LEAN={lean}" in args and lean.is_relative_to(default.paths.build_dir)
    assert (TORCH_LEAN / "torch" / "all.h").is_file()
    assert "with the lean <torch/all.h>" in render_plan(default)
    full = plan(zen4, target="portable", settings={**FULL_TORCH_HEADERS})
    assert full.torch_headers == "full"
    assert "VCB_TORCH_LEAN" not in full.env["CMAKE_ARGS"]
    assert "with torch's own all.h" in render_plan(full)


@pytest.mark.parametrize(("build_type", "level"), [("Release", "O2"), ("RelWithDebInfo", "O3")])
def test_vllms_libraries_compile_at_the_level_asked_whatever_the_build_type(
    host_of: Callable[..., Host], build_type: str, level: str
) -> None:
    """-O2 by default, upstream's default build's level; oneDNN keeps its own (CMake's side:
    tests/integration/test_vllm_libraries.py)."""
    zen4 = host_of("x86-zen4")
    default = plan(zen4, target="portable")
    assert default.opt_level == "O2" and default.build_type == "Release"
    settings = {**BuildOptions().settings, "opt_level": level}
    asked = plan(zen4, target="portable", build_type=build_type, settings=settings)
    args = asked.env["CMAKE_ARGS"].split()
    assert f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={LIBRARIES_CMAKE}" in args
    assert f"-DVCB_OPT_LEVEL=-{level}" in args and asked.env["CMAKE_BUILD_TYPE"] == build_type
    assert f"vLLM's kernels built {build_type} at -{level} with" in render_plan(asked)


def test_kernel_libraries_compile_torchs_headers_once_unless_told_not_to(
    host_of: Callable[..., Host],
) -> None:
    """By default (GCC makes kernels whose code is not byte for byte the same: checked with
    upstream's kernel tests, docs/benchmarks.md)."""
    zen4 = host_of("x86-zen4")
    portable = plan(zen4, target="portable")
    args = portable.env["CMAKE_ARGS"].split()
    assert f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={LIBRARIES_CMAKE}" in args
    assert "-DVCB_PCH_TARGETS=_C,_C_AVX512,_C_AVX2" in args
    # ccache caches no unit that includes a precompiled header without it
    assert portable.env["CCACHE_SLOPPINESS"] == "pch_defines,time_macros"
    assert "lean <torch/all.h>, precompiled once for _C, _C_AVX512, _C_AVX2" in render_plan(
        portable
    )
    era = plan(zen4, "0.16.0")  # one _C
    assert "-DVCB_PCH_TARGETS=_C" in era.env["CMAKE_ARGS"].split()
    full = plan(
        zen4, target="portable", settings={**BuildOptions().settings, "torch_headers": "full"}
    )
    assert "-DVCB_PCH_TARGETS=_C,_C_AVX512,_C_AVX2" in full.env["CMAKE_ARGS"].split()
    assert "VCB_TORCH_LEAN" not in full.env["CMAKE_ARGS"]
    # on Arm only when asked: not measured there
    graviton = host_of("arm-graviton3")
    assert plan(graviton).precompiled_headers == ()
    asked = plan(graviton, origins={"precompiled_headers": "flag"})
    assert "-DVCB_PCH_TARGETS=_C,_C_ARM_BF16I8MM" in asked.env["CMAKE_ARGS"].split()
    off = plan(zen4, target="portable", settings=IN_EACH_UNIT)
    assert "VCB_PCH_TARGETS" not in off.env["CMAKE_ARGS"]
    assert "CCACHE_SLOPPINESS" not in off.env and off.precompiled_headers == ()
    assert "precompiled" not in render_plan(off)


def test_the_users_own_ccache_sloppiness_is_kept(
    host_of: Callable[..., Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CCACHE_SLOPPINESS", "include_file_mtime,time_macros")
    result = plan(host_of("x86-zen4"), target="portable")
    assert result.env["CCACHE_SLOPPINESS"] == "include_file_mtime,time_macros,pch_defines"


def test_ccache_compiles_its_preprocessed_unit_unless_a_header_is_precompiled_or_told_not_to(
    host_of: Callable[..., Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its run_second_cpp = false (tests/integration/test_vllm_libraries.py: the same objects)."""
    zen4 = host_of("x86-zen4")
    assert plan(zen4, target="portable", settings=IN_EACH_UNIT).env["CCACHE_NOCPP2"] == "1"
    assert "CCACHE_NOCPP2" not in plan(zen4, target="portable").env
    monkeypatch.setenv("CCACHE_CPP2", "1")  # the user's own word
    assert "CCACHE_NOCPP2" not in plan(zen4, target="portable", settings=IN_EACH_UNIT).env


def test_old_gxx_is_replaced_by_a_provisioned_one(
    host_of: Callable[..., Host], fake_programs
) -> None:
    result = plan(host_of("x86-zen4"), work_dir=Path("/cache"))
    assert result.compiler.origin == "provisioned"
    assert result.env["CXX"] == "/cache/toolchains/gcc-12.4.0-5-trixie/usr/bin/g++-12"
    assert [s.name for s in result.steps][:5] == [
        "fetch-source",
        "apply-patches",
        "third-party-sources",
        "provision-toolchain",
        "check-toolchain",
    ]
    fake_programs.add("g++-13", "13.3.0\n")
    newer = plan(dataclasses.replace(host_of("x86-zen4")))
    assert newer.compiler.origin == "PATH" and newer.env["CXX"].endswith("/g++-13")
    assert newer.env["CC"].endswith("/gcc-13")
    assert "provision-toolchain" not in [s.name for s in newer.steps]


def test_mirror_points_cmake_at_local_sources(host_of: Callable[..., Host], tmp_path: Path) -> None:
    (tmp_path / "ComputeLibrary-52.6.0.tar.gz").write_bytes(b"")
    result = plan(host_of("arm-graviton3"), sources=tmp_path, work_dir=Path("/cache"))
    assert result.env["FETCHCONTENT_SOURCE_DIR_ONEDNN"].startswith("/cache/builds/")
    assert result.env["ACL_ROOT_DIR"].endswith("/deps/ComputeLibrary-52.6.0")
    assert {d.mirror_file for d in result.third_party} == {
        tmp_path / "oneDNN-9c5be1cc59e368aebf0909e6cf20f981ea61462a.tar.gz",
        tmp_path / "ComputeLibrary-52.6.0.tar.gz",
    }
    assert result.arm_acl is True and "VLLM_CPU_ARM_ACL" not in result.env.get("CMAKE_ARGS", "")
    assert any("no recorded hash for ComputeLibrary" in w for w in result.warnings)
    without = plan(host_of("x86-zen4"))
    assert "FETCHCONTENT_SOURCE_DIR_ONEDNN" not in without.env
    assert any("download oneDNN v3.13 from GitHub" in w for w in without.warnings)


def test_recipe_patches_are_planned_for_sdists_only(host_of: Callable[..., Host]) -> None:
    result = plan(host_of("x86-zen4"))
    assert [p.file.name for p in result.patches] == [
        "vllm-0.32-cpu-slot-mapping-fallback.patch",
        "vllm-cpu-x86-tiers.patch",
    ]
    assert "apply-patches" in [s.name for s in result.steps]
    checkout = plan(host_of("x86-zen4"), source_dir=Path("/src/vllm"))
    assert "apply-patches" not in [s.name for s in checkout.steps]
    assert any("not applied to a --source-dir tree" in w for w in checkout.warnings)
    arm = plan(host_of("arm-graviton3"), "0.34.0", sources=Path("/mirror"))
    assert [p.file.name for p in arm.patches] == ["vllm-cpu-acl-max-jobs.patch"]


def test_a_source_tree_keeps_the_prune_list_only_with_the_sdists_onednn_callers(
    host_of: Callable[..., Host], tmp_path: Path
) -> None:
    with tarfile.open(FIXTURES / "sdists" / "vllm-0.32.0.tar.gz") as tar:
        tar.extractall(tmp_path, **SAFE_EXTRACT)
    tree = tmp_path / "vllm-0.32.0"
    same = plan(host_of("x86-zen4"), source_dir=tree, target="portable")
    assert same.onednn_prune is not None
    assert same.onednn_prune.file.name == "vllm-0.32.0-x86_64-portable.txt"
    assert not any("oneDNN compiles whole" in w for w in same.warnings)
    helper = tree / "csrc" / "cpu" / "dnnl_helper.h"
    helper.write_text(helper.read_text() + "\n// calls one more oneDNN primitive\n")
    changed = plan(host_of("x86-zen4"), source_dir=tree, target="portable")
    assert changed.onednn_prune is None
    assert "VCB_ONEDNN_SKIP" in same.env["CMAKE_ARGS"]
    assert "-DVCB_ONEDNN_SKIP" not in changed.env.get("CMAKE_ARGS", "")
    assert any(
        f"oneDNN compiles whole: {tree} calls oneDNN otherwise than vLLM 0.32.0's sdist" in w
        and "vllm-0.32.0-x86_64-portable.txt" in w
        for w in changed.warnings
    )


@pytest.mark.integration  # applies the recipe's cross patch with the real `patch`
def test_a_source_tree_with_the_recipes_patches_applied_keeps_the_prune_list(
    host_of: Callable[..., Host], tmp_path: Path
) -> None:
    """The plan asks for the recipe's patches to be applied to a --source-dir tree by hand, and
    a cross build needs them (the tree must read VLLM_CPU_TARGET_MACHINE); the cross patch adds
    a cmake line naming oneDNN. Such a tree is the sdist the neon list was learned from, patched
    as build-wheel patches it: it keeps the list."""
    with tarfile.open(FIXTURES / "sdists" / "vllm-0.32.0.tar.gz") as tar:
        tar.extractall(tmp_path, **SAFE_EXTRACT)
    tree = tmp_path / "vllm-0.32.0"
    cross = RECIPES / "patches" / "vllm-0.32-cpu-arm-cross.patch"
    patch = shutil.which("patch", path=os.defpath)  # PATH holds only this test's fakes
    assert patch is not None
    subprocess.check_call([patch, "-p1", "--forward", "--batch", "-s", "-i", cross], cwd=tree)
    assert "VLLM_CPU_ARM_ACL" in (tree / "cmake" / "cpu_extension.cmake").read_text()
    # a mirror without ACL's archive: the neon list was learned without ACL
    options = {"source_dir": tree, "target": "neon", "arch": "aarch64", "sources": tmp_path}
    patched = plan(host_of("x86-zen4"), **options)
    assert not any("oneDNN compiles whole" in w for w in patched.warnings)
    assert patched.onednn_prune is not None
    assert patched.onednn_prune.file.name == "vllm-0.32.0-aarch64-neon.txt"
    helper = tree / "csrc" / "cpu" / "dnnl_helper.h"
    helper.write_text(helper.read_text() + "\n// calls one more oneDNN primitive\n")
    changed = plan(host_of("x86-zen4"), **options)
    assert changed.onednn_prune is None
    assert any("oneDNN compiles whole" in w for w in changed.warnings)


def test_an_arm_list_learned_without_acl_is_not_applied_to_a_build_with_it(
    host_of: Callable[..., Host], tmp_path: Path
) -> None:
    without = plan(host_of("arm-graviton2"), target="neon", sources=tmp_path)  # no ACL archive
    assert without.arm_acl is False
    assert without.onednn_prune is not None and without.onednn_prune.acl is False
    assert "-DVCB_ONEDNN_SKIP=" in without.env["CMAKE_ARGS"]
    with_acl = plan(host_of("arm-graviton2"), target="neon")  # cmake downloads ACL
    assert with_acl.arm_acl is True and with_acl.onednn_prune is None
    assert "-DVCB_ONEDNN_SKIP=" not in with_acl.env["CMAKE_ARGS"]
    assert any(
        "oneDNN compiles whole: the list vllm-0.32.0-aarch64-neon.txt was learned without the "
        "Arm Compute Library and this build is with it" in w
        for w in with_acl.warnings
    )


def test_plan_json_has_the_promised_keys(host_of: Callable[..., Host]) -> None:
    data = json.loads(json.dumps(plan(host_of("x86-zen4")).to_json()))
    for key in (
        "vllm_version",
        "target_isa",
        "max_jobs",
        "env",
        "python",
        "torch",
        "wheel_version",
        "source",
        "steps",
    ):
        assert key in data
    assert data["source"]["sha256"] == load_recipe(RECIPES, "0.32.0").sha256
    assert data["torch"]["requirement"] == "torch==2.13.0+cpu"
    assert all(isinstance(value, str) for value in data["env"].values())
    assert data["env"]["VLLM_TARGET_DEVICE"] == "cpu"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SAVED = (
    "--cpuinfo",
    str(FIXTURES / "cpuinfo" / "x86-zen4.txt"),
    "--meminfo",
    str(FIXTURES / "meminfo" / "buildhost-24g.txt"),
)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--vllm", "0.1.0"), 2, "`python -m toolchain new-recipe --vllm 0.1.0` (nox -s"),
        (("--vllm", "0.32.0", "--target", "amx"), 5, "builds the targets portable"),
        (("--vllm", "0.32.0", "--python", "3.9"), 5, "3.9 is outside that range"),
        (("--vllm", "0.32.0", "--jobs", "0"), 2, "--jobs must be at least 1"),
        (("--vllm", "0.32.0", "--jobs", "many"), 2, "invalid int value"),
    ],
)
def test_bad_input_is_one_clear_error(
    host_of: Callable[..., Host],
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    result, _, err = _run(capsys, *SAVED, *args)
    assert result == code
    assert message in err
    assert "Traceback" not in err


def test_build_wheel_for_a_release_without_a_recipe_names_the_command_that_makes_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_probe: None, fake_programs: object
) -> None:
    """Before it creates anything: no build folder, no wheel folder."""
    work, wheels = tmp_path / "work", tmp_path / "wheels"
    argv = ["build-wheel", "--vllm", "0.99.0", "--work-dir", str(work)]
    assert main([*argv, "--wheel-dir", str(wheels)]) == 2
    err = capsys.readouterr().err
    assert "`python -m toolchain new-recipe --vllm 0.99.0` (nox -s" in err
    assert "Traceback" not in err
    assert not work.exists() and not wheels.exists()


MACHINES = {
    "x86-zen4": ("--cpuinfo", str(FIXTURES / "cpuinfo" / "x86-zen4.txt"), *SAVED[2:]),
    "arm-graviton3": ("--cpuinfo", str(FIXTURES / "cpuinfo" / "arm-graviton3.txt"), *SAVED[2:]),
    "mac-m2": (
        "--sysctl",
        str(FIXTURES / "sysctl" / "mac-m2-monterey.txt"),
        "--vm-stat",
        str(FIXTURES / "vm_stat" / "mac-16g-partial.txt"),
    ),
}


@pytest.mark.parametrize("version", known_versions(RECIPES))
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_plan_works_for_every_shipped_recipe(
    host_of: Callable[..., Host],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    machine: str,
    version: str,
) -> None:
    # each machine plans its own build: an Arm machine builds natively (a cross build from x86
    # needs the recipe's cross patch, which only some releases have)
    build_arch = "aarch64" if machine.startswith("arm") else "x86_64"
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: build_arch)
    code, out, err = _run(capsys, *MACHINES[machine], "--vllm", version, "--json")
    assert code == 0, err
    data = json.loads(out)
    recipe = load_recipe(RECIPES, version)
    assert data["vllm_version"] == version
    if data["arch"] == "arm64":  # macOS: the [darwin] table
        assert recipe.darwin is not None
        torch, model = recipe.darwin.torch, recipe.darwin.isa_model.name
    else:
        torch, model = recipe.torch[data["arch"]], recipe.isa_models[data["arch"]].name
    assert data["torch"]["requirement"] == f"torch=={torch}"
    assert data["isa_model"] == model


def test_malformed_recipe_from_the_command_line(
    host_of: Callable[..., Host], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "isa-models.toml").write_text((RECIPES / "isa-models.toml").read_text())
    (tmp_path / "vllm-1.0.0.toml").write_text('vllm = "1.0.0"\n')
    code, _, err = _run(capsys, *SAVED, "--recipes", str(tmp_path), "--vllm", "1.0.0")
    assert code == 4
    assert f"{tmp_path / 'vllm-1.0.0.toml'}: key 'source' must be a table" in err


def test_command_line_beats_environment_beats_pyproject(
    host_of: Callable[..., Host],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.vllm-cpu-builder]\nvllm = "0.16.0"\njobs = 1\n')
    data = json.loads(_run(capsys, *SAVED, "--json")[1])
    assert (data["vllm_version"], data["max_jobs"]) == ("0.16.0", 1)
    monkeypatch.setenv("MAX_JOBS", "2")
    monkeypatch.setenv("VCB_VLLM", "0.32.0")
    data = json.loads(_run(capsys, *SAVED, "--json")[1])
    assert (data["vllm_version"], data["max_jobs"]) == ("0.32.0", 2)
    data = json.loads(_run(capsys, *SAVED, "--json", "--jobs", "1", "--vllm", "0.34.0")[1])
    assert (data["vllm_version"], data["max_jobs"]) == ("0.34.0", 1)
