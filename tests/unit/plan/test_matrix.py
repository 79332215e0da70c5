"""`matrix`: the CI build matrix, each cell an exact build-wheel command and the runner it needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import PlanError
from toolchain.plan.matrix import build_matrix
from toolchain.plan.recipes import load_recipe

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def test_every_target_of_an_era_with_the_runner_it_needs() -> None:
    cells = build_matrix([load_recipe(RECIPES, "0.16.0")], arch="x86_64")
    assert [c.target for c in cells] == ["avx2", "avx512", "avx512vnni", "avx512bf16", "amx"]
    avx512 = cells[1]
    assert avx512.command == "nox -s build-wheel -- --vllm 0.16.0 --target avx512 --python 3.11"
    assert set(avx512.must_lack) == {"avx512_bf16", "avx512_vnni", "amx_bf16"}
    assert "avx512f" in avx512.must_have


def test_arm_cells_and_the_shared_cache() -> None:
    cells = build_matrix(
        [load_recipe(RECIPES, "0.33.0")], arch="aarch64", pythons=["3.12"], cache=True
    )
    assert [c.name for c in cells] == [
        "vllm-0.33.0-aarch64-neon-py3.12",
        "vllm-0.33.0-aarch64-bf16-py3.12",
        "vllm-0.33.0-aarch64-bf16i8mm-py3.12",
    ]
    assert all(c.command.endswith('--cache "$VCB_CACHE"') for c in cells)


def test_the_arm_portable_era_builds_its_default_named_with_its_arch() -> None:
    """0.32 on Arm builds one portable wheel, as x86 does; `portable` names a target of both
    architectures, so the cell's command says which."""
    recipe = load_recipe(RECIPES, "0.32.0")
    (cell,) = build_matrix([recipe], arch="aarch64")
    assert cell.name == "vllm-0.32.0-aarch64-portable-py3.11"
    assert cell.command.endswith("--target portable --python 3.11 --arch aarch64")
    assert cell.must_have == ("asimd", "dotprod", "fp16") and cell.must_lack == ()
    (x86,) = build_matrix([recipe], arch="x86_64")
    assert x86.command.endswith("--target portable --python 3.11 --arch x86_64")
    lean = build_matrix([recipe], arch="aarch64", targets=["bf16i8mm"])
    assert lean[0].command.endswith("--target bf16i8mm --python 3.11")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"targets": ["amx"]}, "builds portable, avx2, avx512, avx512bf16; not amx"),
        ({"pythons": ["3.10"]}, "needs Python"),
    ],
)
def test_cells_that_cannot_build_are_refused(kwargs: dict[str, list[str]], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        build_matrix([load_recipe(RECIPES, "0.32.0")], arch="x86_64", **kwargs)  # type: ignore[arg-type]


def test_json_is_a_github_actions_include_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--vllm", "0.32.0", "--arch", "x86_64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["include"]
    assert data["include"][0]["command"].startswith("nox -s build-wheel -- --vllm 0.32.0")


def test_the_one_wheel_era_builds_its_default_unless_lean_targets_are_asked_for() -> None:
    recipe = load_recipe(RECIPES, "0.32.0")
    assert [c.target for c in build_matrix([recipe], arch="x86_64")] == ["portable"]
    lean = build_matrix([recipe], arch="x86_64", targets=["avx2", "avx512bf16"])
    assert [c.command for c in lean] == [
        "nox -s build-wheel -- --vllm 0.32.0 --target avx2 --python 3.11",
        "nox -s build-wheel -- --vllm 0.32.0 --target avx512bf16 --python 3.11",
    ]
    assert "avx512_bf16" in lean[1].must_have and lean[1].must_lack == ()


def _cells(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["matrix", "--arch", "x86_64", "--json", *args]) == 0
    return [cell["name"] for cell in json.loads(capsys.readouterr().out)["include"]]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--vllm", "0.32.0", "--vllm", "0.32.0"], ["vllm-0.32.0-x86_64-portable-py3.11"]),
        (
            ["--vllm", "0.32.0", "--target", "avx512", "--target", "avx2", "--target", "avx512"],
            ["vllm-0.32.0-x86_64-avx512-py3.11", "vllm-0.32.0-x86_64-avx2-py3.11"],
        ),
        (
            ["--vllm", "0.32.0", "--python", "3.12", "--python", "3.11", "--python", "3.12"],
            ["vllm-0.32.0-x86_64-portable-py3.12", "vllm-0.32.0-x86_64-portable-py3.11"],
        ),
    ],
)
def test_a_build_asked_for_twice_is_one_cell_in_the_order_asked(
    capsys: pytest.CaptureFixture[str], args: list[str], names: list[str]
) -> None:
    """#31 F20: two CI jobs for one cell race to publish the same wheel."""
    assert _cells(capsys, *args) == names


def test_two_recipes_of_one_release_are_one_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vllm-0.32.toml (vllm = "0.32") and vllm-0.32.0.toml name one release: one cell."""
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    text = (recipes / "vllm-0.32.0.toml").read_text()
    (recipes / "vllm-0.32.toml").write_text(text.replace('vllm = "0.32.0"', 'vllm = "0.32"', 1))
    names = _cells(capsys, "--recipes", str(recipes), "--vllm", "0.32.0", "--vllm", "0.32")
    assert names == ["vllm-0.32.0-x86_64-portable-py3.11"]


@pytest.mark.parametrize("python", ["3.11.0", "3", "py3.11", "3.11 "])
def test_a_python_build_wheel_would_refuse_is_refused_up_front(
    capsys: pytest.CaptureFixture[str], python: str
) -> None:
    assert main(["matrix", "--arch", "x86_64", "--vllm", "0.32.0", "--python", python]) == 2
    assert "give a Python as MAJOR.MINOR" in capsys.readouterr().err
