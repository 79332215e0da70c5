"""A recipe's [[onednn_prune]] entries: one list per target and architecture, the `arch` key
checked like the other keys, and the plan takes the list of its own target on its own machine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolchain.errors import DataFileError
from toolchain.plan.recipes import Recipe, load_recipe
from toolchain.plan.switches import onednn_prune

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
# the index of the entry a test appends: after the shipped ones
ADDED = f"onednn_prune[{(RECIPES / 'vllm-0.32.0.toml').read_text().count('[[onednn_prune]]')}]"


def _recipes_with(tmp_path: Path, entry: str, *, arm_twin: bool = False) -> Path:
    """The shipped recipes, 0.32.0 with one more [[onednn_prune]] entry (and a 3-unit list)."""
    folder = tmp_path / "recipes"
    shutil.copytree(RECIPES, folder)
    (folder / "onednn-prune" / "extra.txt").write_text(
        "# a list\ndnnl_cpu a.cpp\ndnnl_cpu b.cpp\ndnnl_common c.cpp\n"
    )
    recipe = folder / "vllm-0.32.0.toml"
    recipe.write_text(
        f'{recipe.read_text()}\n[[onednn_prune]]\n{entry}\nfile = "onednn-prune/extra.txt"\n'
        'reason = "a test"\n'
    )
    if arm_twin:  # a target name both architectures have (Arm's `portable` is one)
        models = folder / "isa-models.toml"
        models.write_text(
            models.read_text().replace(
                "[arm-tiers.targets.neon]",
                '[arm-tiers.targets.avx512]\nmin_isa = ["asimd"]\n\n[arm-tiers.targets.neon]',
            )
        )
    return folder


def _list_for(recipe: Recipe, arch: str, target: str) -> int | None:
    found = onednn_prune(recipe, recipe.isa_models[arch].targets[target])
    return found.units if found else None


def test_an_aarch64_list_applies_to_that_target_on_arm_only(tmp_path: Path) -> None:
    recipe = load_recipe(_recipes_with(tmp_path, 'target = "bf16"\narch = "aarch64"'), "0.32.0")
    assert _list_for(recipe, "aarch64", "bf16") == 3
    assert _list_for(recipe, "aarch64", "bf16i8mm") is None
    assert _list_for(recipe, "x86_64", "avx2") == 184  # the shipped x86 list, unchanged
    assert _list_for(recipe, "x86_64", "avx512") is None
    assert recipe.onednn_prune[-1].arch == "aarch64"


def test_a_target_both_architectures_have_needs_its_arch(tmp_path: Path) -> None:
    folder = _recipes_with(tmp_path, 'target = "avx512"', arm_twin=True)
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert f"{ADDED}: target 'avx512' is a target of x86_64 and aarch64" in str(
        caught.value.message
    )
    assert "key 'arch'" in caught.value.message

    folder = _recipes_with(tmp_path / "b", 'target = "avx512"\narch = "x86_64"', arm_twin=True)
    recipe = load_recipe(folder, "0.32.0")
    assert _list_for(recipe, "x86_64", "avx512") == 3
    assert _list_for(recipe, "aarch64", "avx512") is None


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('target = "neon"\narch = "arm64"', "{ADDED}: key 'arch' must be one of x86_64"),
        (
            'target = "avx512"\narch = "aarch64"',
            "{ADDED}: key 'target': this recipe's aarch64 ISA model (arm-tiers) has no 'avx512'",
        ),
        ('target = "neon"\narch = 64', "{ADDED}: key 'arch' must be a non-empty string"),
        ('target = "avx2"', "{ADDED}: a second list for target 'avx2'"),
        ('target = "avx2"\narch = "x86_64"', "{ADDED}: a second list for target 'avx2'"),
        ('target = "neon"\narch = "aarch64"', "{ADDED}: a second list for target 'neon' on"),
        ('target = "neon"\narches = "aarch64"', "{ADDED}"),
        (
            'target = "avx512"\ncallers = "522e430c"',
            "{ADDED}: key 'callers' must be 'sha256:' and 64 hex digits, got '522e430c'",
        ),
    ],
)
def test_a_wrong_entry_names_the_recipe_and_key(tmp_path: Path, entry: str, expected: str) -> None:
    folder = _recipes_with(tmp_path, entry)
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert caught.value.exit_code == 4
    assert str(folder / "vllm-0.32.0.toml") in caught.value.message
    assert expected.format(ADDED=ADDED) in caught.value.message


def test_an_entry_without_arch_is_for_the_architecture_that_has_its_target() -> None:
    recipe = load_recipe(RECIPES, "0.32.0")
    assert [(p.target, p.arch) for p in recipe.onednn_prune][:1] == [("avx2", "x86_64")]
