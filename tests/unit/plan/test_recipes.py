"""Recipes load, are validated with the file and key named, and match what PyPI serves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from toolchain.errors import DataFileError, UsageError
from toolchain.plan.recipes import known_versions, load_recipe
from toolchain.targets import default_recipes_dir, load_isa_models
from toolchain.util.simple_api import IndexFile, parse_project_page, project_files

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def test_shipped_recipes_cover_the_required_releases() -> None:
    versions = known_versions(RECIPES)
    assert "0.32.0" in versions
    assert any(Version(v) < Version("0.17") for v in versions), "one release before 0.17"
    for version in versions:
        recipe = load_recipe(RECIPES, version)
        assert str(recipe.vllm) == version
        assert recipe.python_requires.contains("3.11.0")


def test_0_32_pins_torch_2_13_cpu_and_needs_gxx_12_3() -> None:
    recipe = load_recipe(RECIPES, "0.32.0")
    assert recipe.torch["x86_64"] == "2.13.0+cpu"
    assert recipe.gxx_min["x86_64"] == "12.3"
    assert recipe.isa_models["x86_64"].name == "x86-dispatch"
    assert "setuptools==78.1.1" in recipe.build_requires
    onednn = [dep for dep in recipe.third_party_for("x86_64") if dep.name == "oneDNN"]
    assert [dep.ref for dep in onednn] == ["v3.13"]
    assert onednn[0].env == "FETCHCONTENT_SOURCE_DIR_ONEDNN"
    assert {dep.env for dep in recipe.third_party_for("aarch64")} == {
        "FETCHCONTENT_SOURCE_DIR_ONEDNN",
        "ACL_ROOT_DIR",
    }


def test_pre_0_17_era_has_one_isa_per_wheel() -> None:
    recipe = load_recipe(RECIPES, "0.16.0")
    model = recipe.isa_models["x86_64"]
    assert list(model.targets) == ["avx2", "avx512", "avx512vnni", "avx512bf16", "amx"]
    assert model.targets["avx2"].env["VLLM_CPU_DISABLE_AVX512"] == "true"


def test_installed_or_source_recipes_are_found() -> None:
    assert "0.32.0" in known_versions(default_recipes_dir())


def test_unknown_version_lists_the_known_ones() -> None:
    with pytest.raises(UsageError) as caught:
        load_recipe(RECIPES, "9.9.9")
    assert "no recipe for vLLM 9.9.9" in caught.value.message
    assert "0.32.0" in caught.value.hint


def _broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    folder = tmp_path / "recipes"
    shutil.copytree(RECIPES, folder)
    recipe = folder / "vllm-0.32.0.toml"
    text = recipe.read_text()
    assert old in text
    recipe.write_text(text.replace(old, new, 1))
    return folder


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('sha256 = "d2c9', 'sha256 = "zz', "[source]: key 'sha256' must be 64 lower-case hex"),
        ('preferred = "3.11"\n', "", "[python]: key 'preferred' must be a non-empty string"),
        ('x86_64 = "x86-dispatch"', 'x86_64 = "x86-magic"', "[isa_model]: key 'x86_64' names no"),
        ("memory_per_job_mib = 3830", "memory_per_job_mib = -1", "key 'memory_per_job_mib'"),
        ('vllm = "0.32.0"', 'vllm = "0.33.0"', "key 'vllm' says 0.33.0"),
        ("[torch]", "[torch", "not valid TOML"),
        ('x86_64 = "2.13.0+cpu"', 'x86_64 = "!2.13.0+cpu"', "[torch]: key 'x86_64': '!2.13.0"),
        (
            'arch = "x86_64"\nrepository',
            'arch = "sparc"\nrepository',
            "third_party[0]: key 'arch' must be one of",
        ),
        (
            'versions = ">=0.32,<0.33"',
            'versions = ">=0.33"',
            "arm-cross.patch applies to vLLM >=0.33, not 0.32.0",
        ),
        ('file = "patches/', 'file = "missing/', "patches[0]: key 'file'"),
        ('target = "avx2"', 'target = "avx3"', "onednn_prune[0]: key 'target'"),
        ('file = "onednn-prune/', 'file = "gone/', "onednn_prune[0]: key 'file'"),
    ],
)
def test_malformed_recipe_names_file_and_key(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    folder = _broken_copy(tmp_path, old, new)
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert str(folder / "vllm-0.32.0.toml") in caught.value.message
    assert expected in caught.value.message


def test_an_onednn_prune_list_needs_target_and_source_on_every_line(tmp_path: Path) -> None:
    folder = _broken_copy(tmp_path, "[[onednn_prune]]", "[[onednn_prune]]")
    listed = folder / "onednn-prune" / "vllm-0.32.0-avx2.txt"
    listed.write_text(listed.read_text() + "dnnl_cpu\n")
    with pytest.raises(DataFileError, match="one 'TARGET SOURCE' line per unit"):
        load_recipe(folder, "0.32.0")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('sdist = "vllm-0.32.0.tar.gz"', 'sdist = "../../x.tar.gz"', "[source]: key 'sdist'"),
        ('sdist = "vllm-0.32.0.tar.gz"', 'sdist = "/etc/passwd"', "[source]: key 'sdist'"),
        ('sdist = "vllm-0.32.0.tar.gz"', 'sdist = ".."', "[source]: key 'sdist'"),
        ('archive = "oneDNN-3.13.tar.gz"', 'archive = "../x"', "third_party[0]: key 'archive'"),
        ('archive = "oneDNN-3.13.tar.gz"', 'archive = "/tmp/x"', "third_party[0]: key 'archive'"),
        ('file = "patches/', 'file = "../patches/', "patches[0]: key 'file'"),
        ('file = "patches/', f'file = "{RECIPES}/patches/', "patches[0]: key 'file'"),
        ('file = "onednn-prune/', 'file = "../onednn-prune/', "onednn_prune[0]: key 'file'"),
        ('file = "onednn-prune/vllm-0.32.0-avx2.txt"', 'file = "/etc/hostname"',
         "onednn_prune[0]: key 'file'"),
    ],
)  # fmt: skip
def test_recipe_paths_cannot_leave_their_folder(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    """Issue #31 F2: a recipe could name any file to write, delete, patch with or prune by."""
    folder = _broken_copy(tmp_path, old, new)
    for sub in ("patches", "onednn-prune"):  # the files named exist, outside the folder
        shutil.copytree(folder / sub, tmp_path / sub)
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert caught.value.exit_code == 4
    assert str(folder / "vllm-0.32.0.toml") in caught.value.message
    assert expected in caught.value.message


@pytest.mark.parametrize("kind", ["patches", "onednn-prune"])
def test_a_symlink_out_of_the_recipes_folder_is_refused(tmp_path: Path, kind: str) -> None:
    """Issue #31 F2: links are resolved: a name inside the folder that leads out is refused."""
    folder = _broken_copy(tmp_path, "[torch]", "[torch]")
    outside = tmp_path / "elsewhere"
    shutil.copytree(folder / kind, outside)
    shutil.rmtree(folder / kind)
    (folder / kind).symlink_to(outside)
    with pytest.raises(DataFileError, match=r"is not a file inside the recipes folder"):
        load_recipe(folder, "0.32.0")


def test_a_prune_list_that_is_not_utf8_is_one_error(tmp_path: Path) -> None:
    """Issue #31 F16: a UnicodeDecodeError traceback before."""
    folder = _broken_copy(tmp_path, "[torch]", "[torch]")
    listed = folder / "onednn-prune" / "vllm-0.32.0-avx2.txt"
    listed.write_bytes(listed.read_bytes() + b"dnnl_cpu caf\xe9.cpp\n")
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert f"{listed} is not UTF-8 text (byte " in caught.value.message
    assert "onednn_prune[0]: key 'file'" in caught.value.message


def test_isa_model_with_unknown_feature_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "isa-models.toml"
    path.write_text(
        '[m]\narch = "x86_64"\nsummary = "s"\n[m.targets.t]\nmin_isa = ["avx512bf16"]\n'
    )
    with pytest.raises(
        DataFileError, match=r"\[m.targets.t\]: key 'min_isa': unknown values \['avx512bf16'\]"
    ):
        load_isa_models(path)


PYPI_PAGE = Path(__file__).resolve().parents[2] / "fixtures" / "pypi" / "vllm-simple.json"
PYPI_URL = "https://pypi.org/simple/vllm/"


def _sha256_of(files: list[IndexFile], filename: str) -> str | None:
    return next((f.sha256 for f in files if f.filename == filename), None)


@pytest.mark.parametrize("version", known_versions(RECIPES))
def test_recipe_sdist_hash_matches_the_saved_pypi_page(version: str) -> None:
    """PyPI's page for vllm as saved (tests/fixtures/pypi/README.md); its live twin is below."""
    recipe = load_recipe(RECIPES, version)
    files = parse_project_page(
        PYPI_PAGE.read_bytes(), "application/vnd.pypi.simple.v1+json", PYPI_URL
    )
    assert _sha256_of(files, recipe.sdist) == recipe.sha256


@pytest.mark.network
@pytest.mark.parametrize("version", known_versions(RECIPES))
def test_recipe_sdist_hash_matches_pypi(version: str) -> None:
    recipe = load_recipe(RECIPES, version)
    assert _sha256_of(project_files(PYPI_URL), recipe.sdist) == recipe.sha256


def _missing_recipes(files: list[IndexFile]) -> tuple[str, list[str]]:
    """(the newest release on the page, the releases from 0.17.0 on that have no recipe)."""
    released = {
        f.filename.removeprefix("vllm-").removesuffix(".tar.gz")
        for f in files
        if f.filename.startswith("vllm-") and f.filename.endswith(".tar.gz")
    }
    wanted = sorted((v for v in released if Version(v) >= Version("0.17.0")), key=Version)
    known = set(known_versions(RECIPES))
    return wanted[-1], [v for v in wanted if v not in known]


def test_every_release_from_0_17_on_the_saved_pypi_page_has_a_recipe() -> None:
    """Issue #32: a recipe for every vLLM release from 0.17.0 to the newest on PyPI. The tests
    parametrized over the shipped recipes cannot notice a missing one; this one does, on the page
    as saved (trimmed to the releases the recipes name: tests/fixtures/pypi/README.md)."""
    files = parse_project_page(
        PYPI_PAGE.read_bytes(), "application/vnd.pypi.simple.v1+json", PYPI_URL
    )
    assert _missing_recipes(files) == ("0.34.0", [])  # 0.34.0: the newest on the saved page


@pytest.mark.network
def test_every_release_from_0_17_on_pypi_has_a_recipe() -> None:
    """The live page, untrimmed: a release newer than the saved page fails here until
    `new-recipe --vllm VERSION` has made its recipe."""
    newest, missing = _missing_recipes(project_files(PYPI_URL))
    assert missing == [], f"no recipe for {missing} (newest on PyPI: {newest})"
