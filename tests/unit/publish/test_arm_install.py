"""install-command for an Arm host (issue #30 item 4): the right wheel and commands for pip and
uv, and requirement markers evaluated for the Python installed into, not this toolkit's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.publish.index import publish_index
from toolchain.publish.install_command import plan_install, plan_uv_install

ARM = "py3-none-manylinux_2_28_aarch64"
GRAVITON3 = dict.fromkeys(["asimd", "fp16", "dotprod", "bf16", "i8mm", "sve"], True)
NEOVERSE_N1 = dict.fromkeys(["asimd", "fp16", "dotprod"], True)
REQUIRES = ("packaging", "intel-openmp; platform_machine == 'x86_64'")


@pytest.fixture
def arm_python(fake_programs) -> Path:  # type: ignore[no-untyped-def]
    """A Python on an aarch64 machine: its wheel tags and marker environment, as it answers."""
    markers = {
        "platform_machine": "aarch64",
        "python_version": "3.11",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "implementation_name": "cpython",
        "os_name": "posix",
    }
    answer = {"tags": ["cp311-cp311-manylinux_2_28_aarch64", ARM, "py3-none-any"],
              "markers": markers}  # fmt: skip
    return fake_programs.add("python3", json.dumps(answer))


@pytest.fixture
def arm_index(tmp_path: Path, make_wheel: Callable[..., Path]) -> str:
    folder = tmp_path / "wheels"
    for target in ("neon", "bf16i8mm"):
        make_wheel(folder, "vcbdemo", f"0.32.0+cpu.{target}", tag=ARM, requires=REQUIRES)
    publish_index(sorted(folder.glob("*.whl")), tmp_path / "index")
    return (tmp_path / "index").as_uri()


@pytest.mark.parametrize(("host", "target"), [(GRAVITON3, "bf16i8mm"), (NEOVERSE_N1, "neon")])
def test_pip_on_an_arm_host_gets_the_variant_it_runs_without_x86_requirements(
    arm_python: Path, arm_index: str, host: dict[str, bool], target: str
) -> None:
    plan = plan_install(arm_index, host, project="vcbdemo", python=arm_python)
    assert plan.chosen.filename == f"vcbdemo-0.32.0+cpu.{target}-{ARM}.whl"
    assert plan.commands[0][-1] == "packaging", "intel-openmp is for x86_64 Pythons only"
    assert plan.commands[-1] == (
        str(arm_python), "-m", "pip", "install", "--index-url", f"{arm_index}/{target}/simple/",
        "--no-deps", f"vcbdemo==0.32.0+cpu.{target}",
    )  # fmt: skip


def test_uv_on_an_arm_host_installs_the_variant_chosen_here(
    arm_python: Path, arm_index: str
) -> None:
    plan = plan_uv_install(arm_index, GRAVITON3, uv="uv", project="vcbdemo", python=arm_python)
    install = ("uv", "pip", "install", "--python", str(arm_python))
    assert plan.commands == (
        (*install, "--index-url", "https://pypi.org/simple", "packaging"),
        (*install, "--index-url", f"{arm_index}/bf16i8mm/simple/", "--no-deps",
         "vcbdemo==0.32.0+cpu.bf16i8mm"),
    )  # fmt: skip
    assert "# uv chooses no aarch64 variant: the per-ISA index, chosen here" in plan.render()
    assert "--preview-features" not in plan.render()
