"""Memory-weighted scheduling: light units many at a time, heavy ones as memory allows."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.detect.host import Host
from toolchain.errors import DataFileError
from toolchain.plan.jobs import UNMEASURED, size_jobs
from toolchain.plan.recipes import CompileMemory, load_recipe
from toolchain.plan.render import render_plan
from toolchain.plan.switches import POOLS_CMAKE
from toolchain.util.units import GIB, MIB

from .test_plan import RECIPES, host_of, plan  # noqa: F401  (host_of is a fixture)

ONEDNN = CompileMemory(what="oneDNN", targets=("dnnl*",), peak_bytes=1100 * MIB, pool="light")
KERNELS = CompileMemory(
    what="vLLM's kernels", targets=("_C*",), peak_bytes=3830 * MIB, pool="heavy"
)


def _sized(cpus: int, available_gib: float, **options: object):  # type: ignore[no-untyped-def]
    return size_jobs(
        cpus=cpus,
        available_bytes=int(available_gib * GIB),
        memory_per_job_bytes=3830 * MIB,
        reserve_bytes=512 * MIB,
        **options,  # type: ignore[arg-type]
    )


def test_light_units_get_the_cpus_heavy_ones_the_memory() -> None:
    sized = _sized(6, 4.66, measured=(ONEDNN, KERNELS))
    light, heavy = sized.pools
    assert (light.jobs, heavy.jobs, sized.max_jobs) == (3, 1, 3)
    assert light.targets == ("dnnl*",) and heavy.what == ("vLLM's kernels", UNMEASURED)
    # the phases never overlap: the peak is the larger of the two, within what is available
    assert sized.expected_peak_bytes == 512 * MIB + max(3 * 1100 * MIB, 3830 * MIB)
    assert sized.expected_peak_bytes <= 4.66 * GIB


@pytest.mark.parametrize(
    ("cpus", "available_gib", "options"),
    [
        (6, 4.66, {}),  # nothing measured: every unit is the heaviest
        (6, 4.66, {"measured": (KERNELS,)}),  # nothing light
        (2, 22, {"measured": (ONEDNN,)}),  # memory holds a heavy unit per CPU anyway
        (6, 4.66, {"measured": (ONEDNN,), "override": 4}),  # --jobs decides
    ],
)
def test_flat_sizing_where_weights_change_nothing(
    cpus: int, available_gib: float, options: dict[str, object]
) -> None:
    sized = _sized(cpus, available_gib, **options)
    assert sized.pools == ()
    assert sized == _sized(cpus, available_gib, override=options.get("override"))


def test_seed_vm_plan_runs_onednn_three_at_a_time_and_kernels_alone(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    seed = host_of("x86-haswell", cpus=6, total_gib=7.75, available_gib=4.66)
    result = plan(seed)
    light, heavy = result.jobs.pools
    assert light.jobs >= 3 and heavy.jobs == 1
    assert result.jobs.expected_peak_bytes <= seed.memory.usable_bytes
    assert result.env["MAX_JOBS"] == str(light.jobs)
    args = result.env["CMAKE_ARGS"].split()
    assert f"-DCMAKE_PROJECT_INCLUDE={POOLS_CMAKE}" in args
    assert f"-DVCB_LIGHT_JOBS={light.jobs}" in args and "-DVCB_HEAVY_JOBS=1" in args
    assert f"-DVCB_LIGHT_TARGETS={','.join(light.targets)}" in args
    text = render_plan(result)
    assert f"scheduling: oneDNN, vLLM's small libraries {light.jobs} at a time" in text
    assert "then vLLM's kernels, every unmeasured target 1 at a time" in text


def test_an_unmeasured_release_keeps_flat_sizing(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    seed = host_of("x86-haswell", cpus=6, total_gib=7.75, available_gib=4.66)
    assert not load_recipe(RECIPES, "0.16.0").compile_memory
    unmeasured = plan(seed, "0.16.0")
    assert (unmeasured.max_jobs, unmeasured.jobs.pools) == (1, ())
    assert "-DVCB_LIGHT" not in unmeasured.env.get("CMAKE_ARGS", "")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('targets = ["dnnl x"]\npeak_mib = 10', "must list CMake target names"),
        ("targets = []\npeak_mib = 10", "must list CMake target names"),
        ('targets = ["dnnl*"]\npeak_mib = 0', "'peak_mib' must be a positive integer"),
        ('targets = ["dnnl*"]\npeak_mib = 9000', "above [build] memory_per_job_mib 3830"),
        ('targets = ["dnnl*"]\npeak_mib = 10\npool = "medium"', "'light' or 'heavy'"),
    ],
)
def test_bad_compile_memory_entries_are_refused(tmp_path: Path, entry: str, message: str) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    for name in ("vllm-0.32.0.toml", "isa-models.toml"):
        (folder / name).write_text((RECIPES / name).read_text())
    for sub in ("patches", "onednn-prune"):
        shutil.copytree(RECIPES / sub, folder / sub)  # a link out of the folder is refused
    recipe = folder / "vllm-0.32.0.toml"
    entry += "" if "pool" in entry else '\npool = "light"'
    recipe.write_text(recipe.read_text() + f'\n[[compile_memory]]\nwhat = "x"\n{entry}\n')
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert message in caught.value.message and "compile_memory[" in caught.value.message


def test_each_architecture_is_weighed_with_its_own_measured_units(
    host_of: Callable[..., Host],  # noqa: F811
) -> None:
    """aarch64's oneDNN units peak higher than x86's (1,946 MiB against 1,103, measured in the
    cross build): an Arm machine runs fewer of them at a time than an x86 one of its size."""
    small = {"cpus": 6, "total_gib": 7.75, "available_gib": 6}
    arm = plan(host_of("arm-graviton2", **small), target="neon")
    x86 = plan(host_of("x86-haswell", **small))
    arm_light, x86_light = arm.jobs.pools[0], x86.jobs.pools[0]
    assert arm_light.memory_per_job_bytes == 2140 * MIB
    assert "dnnl_cpu_aarch64" in arm_light.targets and "dnnl_cpu_x64" not in arm_light.targets
    assert x86_light.memory_per_job_bytes == 1220 * MIB
    assert "dnnl_cpu_aarch64" not in x86_light.targets
    assert (arm_light.jobs, x86_light.jobs) == (2, 4)
    assert arm.jobs.expected_peak_bytes <= 6 * GIB
