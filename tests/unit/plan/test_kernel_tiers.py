"""Lean x86 targets and the build type: which tiers, which CMake/oneDNN switches, which patch."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.detect.host import Host
from toolchain.errors import PlanError
from toolchain.plan.planner import BuildOptions, plan_build
from toolchain.plan.recipes import load_recipe
from toolchain.plan.render import render_plan
from toolchain.plan.switches import FORGET, LIBRARIES_CMAKE, PRUNE_CMAKE, lean_header_dir

from .test_plan import FULL_TORCH_HEADERS, IN_EACH_UNIT, RECIPES, SAVED, _run, host_of, plan  # noqa: F401  (host_of is a fixture)

TIERS_PATCH = "vllm-cpu-x86-tiers.patch"
ALL_TIERS = ("_C", "_C_AVX512", "_C_AVX2")


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
@pytest.mark.parametrize(
    ("target", "tiers", "onednn"),
    [
        ("portable", ALL_TIERS, None),
        ("avx2", ("_C_AVX2",), ("AVX2", "AVX2")),
        ("avx512", ("_C_AVX512",), ("AVX512", "AVX512")),
        ("avx512bf16", ("_C",), ("AMX", "ALL")),
    ],
)
def test_every_x86_target_of_the_one_wheel_era(
    host_of: Callable[..., Host],  # noqa: F811
    version: str,
    target: str,
    tiers: tuple[str, ...],
    onednn: tuple[str, str] | None,
) -> None:
    result = plan(host_of("x86-zen4"), version, target=target)
    assert result.kernel_tiers == tiers
    assert TIERS_PATCH in [p.file.name for p in result.patches]
    lean = tiers != ALL_TIERS
    assert result.env.get("VLLM_CPU_X86_TIERS") == (",".join(tiers) if lean else None)
    expected_args = (
        f"-DONEDNN_ENABLE_PRIMITIVE_CPU_ISA={onednn[0]} "
        f"-DONEDNN_ENABLE_GEMM_KERNELS_ISA={onednn[1]}"
        if onednn
        else None
    )
    # the x86 lists learned so far, by the list file's name; 0.34.0 takes 0.32.0's (the same
    # oneDNN callers)
    lists = {"avx2": "vllm-0.32.0-avx2.txt",
             "avx512bf16": "vllm-0.32.0-x86_64-avx512bf16.txt",
             "portable": "vllm-0.32.0-x86_64-portable.txt"}  # fmt: skip
    if target in lists:
        assert result.onednn_prune is not None and result.onednn_prune.units == 184
        # the list as the recipe was read, written into the build folder by the compile step
        skip = result.paths.recipe_files / result.onednn_prune.file.name
        prune_args = f"-DCMAKE_PROJECT_oneDNN_INCLUDE={PRUNE_CMAKE} -DVCB_ONEDNN_SKIP={skip}"
        expected_args = f"{expected_args} {prune_args}" if expected_args else prune_args
        assert PRUNE_CMAKE.is_file() and skip.name == lists[target]
        assert "without the 184 units it never links" in render_plan(result)
    else:
        assert result.onednn_prune is None
        assert "every unit compiled (no prune list for this target" in render_plan(result)
    # vLLM's libraries get -O2 and the lean <torch/all.h>, precompiled once per kernel tier
    lean = lean_header_dir(result.paths.recipe_files)
    lean_args = (
        f"-DCMAKE_PROJECT_vllm_extensions_INCLUDE={LIBRARIES_CMAKE} -DVCB_OPT_LEVEL=-O2 "
        f"-DVCB_TORCH_LEAN={lean} -DVCB_PCH_TARGETS={','.join(tiers)}"
    )
    # what an earlier plan of the same build folder left in its cmake cache is unset first
    assert result.env.get("CMAKE_ARGS") == " ".join(
        [*FORGET, *expected_args.split(), *lean_args.split()]
    )
    assert result.onednn_isa == (onednn[0] if onednn else "ALL")
    assert result.wheel_version == f"{version}+cpu.{target}"


@pytest.mark.parametrize(
    ("machine", "version", "target"),
    [
        ("x86-zen4", "0.16.0", "avx512bf16"),
        ("x86-haswell", "0.16.0", "avx2"),
        ("arm-graviton3", "0.32.0", "bf16i8mm"),
        ("arm-graviton3", "0.16.0", "bf16"),
    ],
)
def test_eras_that_fix_the_isa_at_build_time_choose_no_tiers(
    host_of: Callable[..., Host],  # noqa: F811
    machine: str,
    version: str,
    target: str,
) -> None:
    result = plan(host_of(machine), version, target=target, sources=Path("/mirror"))
    assert (result.kernel_tiers, result.onednn_isa) == ((), None)
    assert "VLLM_CPU_X86_TIERS" not in result.env
    assert "ONEDNN" not in result.env.get("CMAKE_ARGS", "")
    assert TIERS_PATCH not in [p.file.name for p in result.patches]
    assert "one kernel library _C; oneDNN as upstream has it, every unit compiled" in render_plan(
        result
    )


def test_portable_stays_the_default_and_the_plan_names_the_leaner_targets(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    zen4 = plan(host_of("x86-zen4"))
    assert zen4.target_isa == "portable"
    assert zen4.target_note.endswith("--target avx2 or avx512 or avx512bf16 compiles less")
    haswell = plan(host_of("x86-haswell"))
    assert haswell.target_isa == "portable"
    assert haswell.target_note.endswith("for CPUs like this one alone, --target avx2 compiles less")
    assert plan(host_of("x86-zen4"), target="avx2").target_note == "target avx2: asked for"


def test_a_lean_wheel_runs_above_its_target_and_is_refused_below(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    # avx2 on an AVX-512 BF16 host: vLLM (patched) loads the AVX2 tier there, so no warning
    above = plan(host_of("x86-zen4"), target="avx2")
    assert not any("cannot import" in w for w in above.warnings)
    below = plan(host_of("x86-haswell"), target="avx512")
    assert below.min_isa[-4:] == ("avx512f", "avx512vl", "avx512bw", "avx512dq")
    assert any("cannot import its kernels" in w for w in below.warnings)


def test_a_lean_target_needs_the_tier_switch(
    host_of: Callable[..., Host],  # noqa: F811
    tmp_path: Path,
) -> None:
    recipe = load_recipe(RECIPES, "0.32.0")
    unpatched = dataclasses.replace(
        recipe, patches=tuple(p for p in recipe.patches if p.file.name != TIERS_PATCH)
    )
    with pytest.raises(PlanError, match=r"needs a patch adding VLLM_CPU_X86_TIERS .*has no such"):
        plan_build(host_of("x86-zen4"), unpatched, BuildOptions(target="avx2"))
    # the portable target builds every tier, as upstream does: no patch needed
    assert plan_build(host_of("x86-zen4"), unpatched, BuildOptions()).target_isa == "portable"
    tree = tmp_path / "vllm"
    tree.mkdir()
    (tree / "setup.py").write_text("ext_modules = []\n")
    with pytest.raises(PlanError, match=r"setup\.py does not read it"):
        plan(host_of("x86-zen4"), target="avx2", source_dir=tree)
    (tree / "setup.py").write_text('os.environ.get("VLLM_CPU_X86_TIERS")\n')
    assert plan(host_of("x86-zen4"), target="avx2", source_dir=tree).kernel_tiers == ("_C_AVX2",)


def test_the_build_type_reaches_cmake_and_is_checked(
    host_of: Callable[..., Host],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan(host_of("x86-zen4")).env["CMAKE_BUILD_TYPE"] == "Release"
    debug = plan(host_of("x86-zen4"), build_type="RelWithDebInfo")
    assert debug.env["CMAKE_BUILD_TYPE"] == "RelWithDebInfo"
    assert "vLLM's kernels built RelWithDebInfo" in render_plan(debug)
    code, _, err = _run(capsys, *SAVED, "--build-type", "Debug")
    assert code == 2 and "--build-type is Release or RelWithDebInfo, not 'Debug'" in err


def _manifest(
    folder: Path,
    name: str,
    *,
    cpu: float,
    build_type: str,
    precompiled: tuple[str, ...] = (),
    torch_headers: str | None = "lean",
    opt_level: str | None = "O2",
) -> None:
    record = {
        "compile": {"cpu_seconds": cpu, "seconds": cpu / 2},
        "env": {"CMAKE_BUILD_TYPE": build_type},
        "precompiled_headers": list(precompiled),
        **({"torch_headers": torch_headers} if torch_headers else {}),
        **({"opt_level": opt_level} if opt_level else {}),
    }
    (folder / f"{name}.manifest.json").write_text(json.dumps(record))


def test_the_plan_expects_what_the_last_build_of_the_same_wheel_cost(
    host_of: Callable[..., Host],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    each = {"settings": IN_EACH_UNIT}  # torch's headers compiled in each unit
    assert plan(host_of("x86-zen4"), target="avx2", wheel_dir=wheels, **each).expected is None
    stem = "vllm-0.32.0+cpu.avx2-cp311-cp311-manylinux_2_34_x86_64.whl"
    _manifest(wheels, stem, cpu=2400.0, build_type="Release")
    _manifest(wheels, stem.replace("cp311", "cp312"), cpu=2600.0, build_type="Release")
    _manifest(wheels, stem.replace("cp311", "cp313"), cpu=9999.0, build_type="RelWithDebInfo")
    _manifest(wheels, stem.replace("avx2", "portable"), cpu=5800.0, build_type="Release")
    pch = stem.replace("cp311", "cp314")  # cheaper, with precompiled headers: not this plan's
    _manifest(wheels, pch, cpu=100.0, build_type="Release", precompiled=("_C_AVX2",))
    # dearer, with torch's own all.h (so is a manifest from before the lean header): not like it
    _manifest(
        wheels,
        stem.replace("cp311", "cp38"),
        cpu=3000.0,
        build_type="Release",
        torch_headers="full",
    )
    _manifest(
        wheels, stem.replace("cp311", "cp39"), cpu=3000.0, build_type="Release", torch_headers=None
    )
    # dearer, at -O3 (so is a Release manifest from before the level): not like it
    _manifest(
        wheels, stem.replace("cp311", "cp37"), cpu=3000.0, build_type="Release", opt_level=None
    )
    (wheels / f"{stem.replace('cp311', 'cp310')}.manifest.json").write_text("{not json")
    expected = plan(host_of("x86-zen4"), target="avx2", wheel_dir=wheels, **each).expected
    assert expected is not None and expected.cpu_seconds == 2600.0
    with_pch = plan(host_of("x86-zen4"), target="avx2", wheel_dir=wheels)
    assert with_pch.expected is not None and with_pch.expected.manifest.startswith(pch)
    assert "cp312" in expected.manifest
    rendered = render_plan(plan(host_of("x86-zen4"), target="avx2", wheel_dir=wheels, **each))
    assert "expected compile: 2,600 CPU-seconds, 21.7 min (the build of vllm-0.32.0+cpu.avx2" in (
        rendered
    )
    args = ("--vllm", "0.32.0", "--target", "avx2", "--wheel-dir", str(wheels), "--json")
    args += ("--no-precompiled-headers",)
    code, out, _ = _run(capsys, *SAVED, *args)
    assert code == 0
    shown = json.loads(out)
    assert shown["expected"]["cpu_seconds"] == 2600.0
    assert (shown["kernel_tiers"], shown["onednn_isa"]) == (["_C_AVX2"], "AVX2")


def test_a_prune_list_in_a_folder_with_a_space_is_refused(
    host_of: Callable[..., Host],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import toolchain.plan.switches as switches_module

    monkeypatch.setattr(switches_module, "PRUNE_CMAKE", Path("/opt/my tools/prune-onednn.cmake"))
    with pytest.raises(PlanError, match=r"has a space, which vLLM's setup\.py cannot pass"):
        plan(host_of("x86-zen4"), "0.32.0", target="avx2")
    # an unpruned target with torch's own all.h in each unit at its build type's level passes
    # no toolkit file to cmake
    own = {**FULL_TORCH_HEADERS, "opt_level": "O3", "precompiled_headers": False}
    full = plan(host_of("x86-zen4"), "0.32.0", target="avx512", settings=own)
    assert "-DCMAKE_PROJECT" not in full.env.get("CMAKE_ARGS", "").replace("-UCMAKE_PROJECT", "")


ARM_TIERS_PATCH = "vllm-0.32-cpu-arm-tiers.patch"


def test_the_arm_portable_wheel_compiles_both_libraries_through_its_patch(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    """0.32 on Arm (issue #29 item 8): portable is the default and names its two libraries;
    the lean Arm targets keep upstream's one _C, chosen by its switches."""
    x86 = host_of("x86-zen4", build_arch="x86_64")
    for result in (plan(x86, arch="aarch64"), plan(x86, target="portable", arch="aarch64")):
        assert (result.arch, result.target_isa, result.cross is not None) == (
            "aarch64",
            "portable",
            True,
        )
        assert result.kernel_tiers == ("_C", "_C_ARM_BF16I8MM")
        assert result.env["VLLM_CPU_ARM_TIERS"] == "_C,_C_ARM_BF16I8MM"
        assert not any(k in result.env for k in ("VLLM_CPU_ARM_BF16", "VLLM_CPU_ARM_I8MM"))
        assert result.min_isa == ("asimd", "fp16", "dotprod")
        names = [p.file.name for p in result.patches]
        assert names.index(ARM_TIERS_PATCH) == names.index("vllm-0.32-cpu-arm-cross.patch") + 1
        assert "kernel tiers _C, _C_ARM_BF16I8MM" in render_plan(result)
    # `portable` alone on an x86 machine is still x86's
    assert plan(x86, target="portable").arch == "x86_64"
    lean = plan(x86, target="bf16i8mm")
    assert lean.kernel_tiers == () and "VLLM_CPU_ARM_TIERS" not in lean.env
    assert lean.env["VLLM_CPU_ARM_BF16"] == lean.env["VLLM_CPU_ARM_I8MM"] == "1"
    # other eras have no Arm portable: the richest target again, and --target portable is x86's
    assert plan(host_of("arm-graviton3"), "0.33.0").target_isa == "bf16i8mm"
    with pytest.raises(PlanError, match="builds the targets neon, bf16, bf16i8mm; not 'portable'"):
        plan(x86, "0.33.0", target="portable", arch="aarch64")


def test_the_arm_portable_target_needs_the_arm_tier_switch(
    host_of: Callable[..., Host],  # noqa: F811
    tmp_path: Path,
) -> None:
    recipe = load_recipe(RECIPES, "0.32.0")
    unpatched = dataclasses.replace(
        recipe, patches=tuple(p for p in recipe.patches if p.file.name != ARM_TIERS_PATCH)
    )
    graviton3 = host_of("arm-graviton3")
    with pytest.raises(PlanError) as caught:
        plan_build(graviton3, unpatched, BuildOptions())
    assert "needs a patch adding VLLM_CPU_ARM_TIERS to vLLM 0.32.0" in caught.value.message
    assert caught.value.hint is not None
    assert "--target neon or bf16 or bf16i8mm" in caught.value.hint
    assert ARM_TIERS_PATCH in caught.value.hint
    tree = tmp_path / "vllm"
    tree.mkdir()
    (tree / "setup.py").write_text('os.environ.get("VLLM_CPU_X86_TIERS")\n')
    with pytest.raises(PlanError, match=r"setup\.py does not read it"):
        plan(graviton3, source_dir=tree)
    (tree / "setup.py").write_text('os.environ.get("VLLM_CPU_ARM_TIERS")\n')
    assert plan(graviton3, source_dir=tree).env["VLLM_CPU_ARM_TIERS"] == "_C,_C_ARM_BF16I8MM"


def test_arch_is_a_setting_of_the_build_commands(
    host_of: Callable[..., Host],  # noqa: F811  (its fake g++, ccache and Pythons)
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: "x86_64")
    for variable in ("CXX", "MAX_JOBS", "VCB_TARGET", "VCB_ARCH"):
        monkeypatch.delenv(variable, raising=False)
    code, out, _ = _run(capsys, *SAVED, "--vllm", "0.32.0", "--arch", "aarch64", "--json")
    assert code == 0
    shown = json.loads(out)
    assert (shown["arch"], shown["target_isa"]) == ("aarch64", "portable")
    assert shown["kernel_tiers"] == ["_C", "_C_ARM_BF16I8MM"]
    monkeypatch.setenv("VCB_ARCH", "aarch64")
    code, out, _ = _run(capsys, *SAVED, "--vllm", "0.32.0", "--json")
    assert code == 0 and json.loads(out)["arch"] == "aarch64"
    code, _, err = _run(capsys, *SAVED, "--arch", "riscv64")
    assert code == 2 and "--arch is x86_64 or aarch64, not 'riscv64'" in err
