"""Targets: the wheel label formatted and read in one place, looked up by architecture and era,
and isa-models.toml and the recipes read strictly (issue #34)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from toolchain.cli import main
from toolchain.errors import DataFileError
from toolchain.plan.recipes import load_recipe
from toolchain.publish.index import publish_index
from toolchain.targets import (
    ISA_MODELS_FILE,
    Label,
    default_recipes_dir,
    load_catalog,
    load_isa_models,
    read_label,
    shipped_catalog,
)

X86 = ["manylinux_2_34_x86_64"]
ARM = ["manylinux_2_34_aarch64"]


def test_the_label_a_target_formats_reads_back_as_that_target() -> None:
    target = shipped_catalog().target("x86_64", Version("0.32.0"), Label(target="avx2"))
    assert target is not None
    version = target.wheel_version("0.32.0")
    assert version == "0.32.0+cpu.avx2"
    assert read_label(Version(version)) == Label(target="avx2")
    assert read_label(Version("0.32.0+cpu.avx2.1")) == Label(target="avx2")  # a rebuild
    assert read_label(Version("0.32.0+cpu")) == Label(target=None)
    assert read_label(Version("0.32.0")) is None
    assert read_label(Version("0.32.0+cuda")) is None


def test_a_target_is_looked_up_in_its_era() -> None:
    """A 0.16 avx2 wheel (one ISA per wheel) needs AVX2 only; 0.17+'s avx2 needs F16C too."""
    catalog = shipped_catalog()
    old = catalog.wheel_target(Version("0.16.0+cpu.avx2"), X86)
    new = catalog.wheel_target(Version("0.32.0+cpu.avx2"), X86)
    assert old is not None and old.model == "x86-switches" and old.min_isa == ("avx2",)
    assert new is not None and new.model == "x86-dispatch" and new.min_isa == ("avx2", "f16c")
    between = catalog.wheel_target(Version("0.16.5+cpu.avx512vnni"), X86)
    assert between is not None and between.model == "x86-switches"


def test_a_bare_cpu_label_is_looked_up_with_its_architecture() -> None:
    """An Arm `+cpu` wheel without a manifest never gets x86 portable's AVX2 needs: it is Arm
    portable in the era that has one (0.32, the arm-tiers patch), else unknown."""
    catalog = shipped_catalog()
    arm = catalog.wheel_target(Version("0.32.0+cpu"), ARM)
    x86 = catalog.wheel_target(Version("0.32.0+cpu"), X86)
    assert arm is not None and arm.model == "arm-tiers" and arm.name == "portable"
    assert arm.min_isa == ("asimd", "fp16", "dotprod")
    for other_era in ("0.31.0+cpu", "0.33.0+cpu", "0.34.0+cpu"):
        assert catalog.wheel_target(Version(other_era), ARM) is None
    assert x86 is not None and x86.name == "portable" and x86.min_isa == ("avx2", "f16c")
    mac = catalog.wheel_target(Version("0.32.0+cpu.bf16"), ["macosx_14_0_arm64"])
    assert mac is not None and mac.model == "apple-sysctl" and mac.march


def _recipes_with_target(tmp_path: Path) -> Path:
    """The shipped recipes plus a user-defined x86 target `zen5` of the dispatch era."""
    folder = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), folder)
    models = folder / ISA_MODELS_FILE
    models.write_text(
        models.read_text()
        + '\n[x86-dispatch.targets.zen5]\nmin_isa = ["avx2", "f16c", "avx512f", "avx512_bf16"]\n'
        'kernel_tiers = ["_C"]\nonednn_isa = "AMX"\n'
    )
    return folder


def test_publish_takes_a_user_target_s_needs_from_recipes(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "0.32.0+cpu.zen5", tag="py3-none-manylinux_2_34_x86_64")
    shipped = publish_index(sorted(wheels.glob("*.whl")), tmp_path / "a")
    assert shipped.wheels[0].min_isa == ()  # the shipped recipes know no zen5
    index = tmp_path / "b"
    code = main(
        ["publish", "--wheel-dir", str(wheels), "--index-dir", str(index),
         "--recipes", str(_recipes_with_target(tmp_path))]
    )  # fmt: skip
    assert code == 0
    variants = json.loads((index / "variants.json").read_text())
    assert variants["variants"]["zen5"]["min_isa"] == ["avx2", "avx512_bf16", "avx512f", "f16c"]


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('kernel_tiers = ["_C", "_C_AVX512", "_C_AVX2"]', 'kernal_tiers = ["_C"]', "kernal_tiers"),
        ('min_isa = ["avx2", "f16c"]\nkernel_tiers', 'min_iza = ["avx2"]\nkernel_tiers', "min_iza"),
        ('default_target = "portable"', 'defualt_target = "portable"', "defualt_target"),
    ],
)
def test_a_misspelled_isa_model_key_names_the_key_and_the_keys_allowed(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    path = tmp_path / ISA_MODELS_FILE
    text = (default_recipes_dir() / ISA_MODELS_FILE).read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DataFileError) as caught:
        load_isa_models(path)
    assert caught.value.exit_code == 4
    assert f"unknown keys ['{key}']" in caught.value.message
    assert "known: [" in caught.value.message and str(path) in caught.value.message


def test_an_unknown_kernel_tier_names_the_tiers_known(tmp_path: Path) -> None:
    path = tmp_path / ISA_MODELS_FILE
    text = (default_recipes_dir() / ISA_MODELS_FILE).read_text()
    path.write_text(text.replace('kernel_tiers = ["_C_AVX512"]', 'kernel_tiers = ["_C_AVX3"]'))
    with pytest.raises(DataFileError) as caught:
        load_isa_models(path)
    message = caught.value.message
    assert "[x86-dispatch.targets.avx512]: key 'kernel_tiers'" in message
    assert "unknown values ['_C_AVX3']" in message
    assert "'_C_AVX2'" in message


def test_a_misspelled_architecture_in_gxx_min_is_refused(tmp_path: Path) -> None:
    """Before, `x86-64 = "12.3"` dropped the g++ floor and 12.2 was accepted."""
    folder = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), folder)
    recipe = folder / "vllm-0.32.0.toml"
    recipe.write_text(recipe.read_text().replace('{ x86_64 = "12.3" }', '{ x86-64 = "12.3" }'))
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert "gxx_min: unknown keys ['x86-64']; known: ['aarch64', 'x86_64']" in caught.value.message


def test_publish_refuses_a_catalog_with_a_misspelled_key(tmp_path: Path) -> None:
    folder = _recipes_with_target(tmp_path)
    models = folder / ISA_MODELS_FILE
    models.write_text(models.read_text().replace('onednn_isa = "AMX"\n', 'onednn = "AMX"\n'))
    with pytest.raises(DataFileError, match=r"unknown keys \['onednn'\]"):
        load_catalog(folder)
