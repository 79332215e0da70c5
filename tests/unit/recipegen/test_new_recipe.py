"""new-recipe: recipes written from sdists cut down to the files it reads (fixtures/sdists)."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from toolchain.cli import main
from toolchain.errors import DataFileError
from toolchain.plan.onednn_callers import callers_digest, sdist_callers
from toolchain.plan.recipes import load_recipe
from toolchain.recipegen import facts
from toolchain.recipegen.new_recipe import files_read, generate, shipped_patches
from toolchain.recipegen.patch_check import dry_run
from toolchain.recipegen.render import Section, render
from toolchain.recipegen.sdist import (
    APPLE_DOCS,
    CPU_EXTENSION,
    SdistFiles,
    read_sdist,
    write_fixture,
)
from toolchain.util.files import sha256_file

ROOT = Path(__file__).resolve().parents[3]
RECIPES = ROOT / "recipes"
SDISTS = ROOT / "tests" / "fixtures" / "sdists"
# What no sdist holds: the measured figures, and the key saying whose they are
MEASURED = {"compile_memory", "onednn_prune", "inherited_from"}


def _facts(recipe: dict[str, Any]) -> dict[str, Any]:
    kept = {key: value for key, value in recipe.items() if key not in MEASURED}
    kept["build"] = {k: v for k, v in recipe["build"].items() if k != "memory_per_job_mib"}
    return kept


def _toml(data: dict[str, Any]) -> str:
    tables = [Section(header="", keys={k: v for k, v in data.items() if not _is_table(v)})]
    for key, item in data.items():
        if isinstance(item, dict):
            tables.append(Section(header=f"[{key}]", keys=item))
        elif _is_table(item):
            tables += [Section(header=f"[[{key}]]", keys=entry) for entry in item]
    return render("poisoned", tables)


def _is_table(item: Any) -> bool:
    return isinstance(item, dict) or (isinstance(item, list) and isinstance(item[0], dict))


def _poisoned_folder(version: str, tmp_path: Path) -> Path:
    """The shipped recipes, the one being regenerated with every sdist fact made wrong: what the
    generator writes can only come from the sdist. What no sdist holds stays, and the generator
    takes it from the recipe it replaces: the measured figures, the preferred Python and what each
    patch is for. A third-party source's commit and archive hash come from another recipe that
    names the same ref, as the recipe's own entry is made wrong too."""
    folder = tmp_path / "recipes"
    shutil.copytree(RECIPES, folder)
    own = folder / f"vllm-{version}.toml"
    data = tomllib.loads(own.read_text())
    data["source"]["sha256"] = "0" * 64
    data["python"]["requires"] = ">=3.8"
    data["torch"] = {"x86_64": "0.0.1", "aarch64": "0.0.1"}
    data["build"]["requires"] = ["poison"]
    data["toolchain"] = {"gxx_min": {"x86_64": "1.0"}, "cmake_min": "1.0"}
    data["isa_model"] = {"x86_64": "x86-dispatch-2tier", "aarch64": "arm-bf16-switch"}
    data["darwin"] = {"torch": "0.0.1", "macos_min": "1.0", "clang_min": "1.0", "isa_model": "x"}
    for entry in data["third_party"]:
        entry.update(repository="https://example.invalid/poison.git", ref="v0.0", archive="x.tgz")
        entry.update(commit="0" * 40, tar_sha256="0" * 64)
    data.pop("drop_requirements", None)
    own.write_text(_toml(data))
    return folder


def _altered(version: str, path: str, change: tuple[str, str], tmp_path: Path) -> Path:
    """The fixture sdist with one replacement in one of its files."""
    fixture = SDISTS / f"vllm-{version}.tar.gz"
    read = read_sdist(fixture, files_read(shipped_patches(RECIPES)))
    files = SdistFiles(name=read.name, files={**read.files, **sdist_callers(fixture)})
    assert change[0] in files.text(path)
    text = files.text(path).replace(change[0], change[1], 1)
    altered = SdistFiles(name=files.name, files={**files.files, path: text})
    sdist = tmp_path / f"vllm-{version}.tar.gz"
    write_fixture(altered, f"vllm-{version}", sdist)
    return sdist


@pytest.mark.integration  # runs `patch --dry-run` for every shipped patch
@pytest.mark.parametrize("version", ["0.32.0", "0.34.0", "0.16.0"])
def test_regenerating_a_shipped_recipe_gives_its_facts(version: str, tmp_path: Path) -> None:
    fixture = SDISTS / f"vllm-{version}.tar.gz"
    folder = _poisoned_folder(version, tmp_path)
    generated = generate(Version(version), fixture, sha256_file(fixture), folder)
    made = tomllib.loads(generated.text)
    shipped = tomllib.loads((RECIPES / f"vllm-{version}.toml").read_text())
    assert made["source"]["sha256"] == sha256_file(fixture)  # the hash is the file's own
    made["source"]["sha256"] = shipped["source"]["sha256"]
    assert _facts(made) == _facts(shipped)
    # 0.32.0 keeps its own measured figures; the others inherit 0.32.0's and say so
    assert made.get("inherited_from") == (None if version == "0.32.0" else "0.32.0")


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0", "0.32.0", "0.34.0"])
def test_the_fixture_was_cut_from_the_sdist_the_recipe_names(version: str) -> None:
    """The real sdist's hash, recorded when its fixture was cut, is the shipped recipe's."""
    real = (SDISTS / f"vllm-{version}.sha256").read_text().split()
    recipe = tomllib.loads((RECIPES / f"vllm-{version}.toml").read_text())
    assert real == [recipe["source"]["sha256"], recipe["source"]["sdist"]]


def test_torch_pins_per_platform_come_from_the_markers() -> None:
    files = read_sdist(SDISTS / "vllm-0.32.0.tar.gz", files_read(shipped_patches(RECIPES)))
    pins = facts.requirements(files).torch
    assert pins == {"x86_64": "2.13.0+cpu", "aarch64": "2.13.0+cpu", "Darwin": "2.13.0"}
    old = read_sdist(SDISTS / "vllm-0.16.0.tar.gz", files_read([]))
    assert facts.requirements(old).torch["aarch64"] == "2.10.0"  # PyPI's torch on Arm then


def test_a_torch_pin_by_python_version_is_refused() -> None:
    """The generator's own Python would pick the pin: not a fact of the release."""
    files = read_sdist(SDISTS / "vllm-0.32.0.tar.gz", files_read(shipped_patches(RECIPES)))
    path, text = files.first(facts.BUILD_REQUIREMENTS)
    line = 'torch==2.13.0+cpu; platform_machine == "x86_64"'
    assert line in text
    altered = text.replace(line, line.replace(";", '; python_version < "3.14" and'), 1)
    changed = SdistFiles(name=files.name, files={**files.files, path: altered})
    with pytest.raises(DataFileError, match="depends on more than the platform"):
        facts.requirements(changed)


@pytest.mark.integration
def test_an_era_between_the_shipped_ones(tmp_path: Path) -> None:
    """0.17: the two-tier dispatch wheel, Arm BF16 by switch only, oneDNN v3.10 everywhere."""
    fixture = SDISTS / "vllm-0.17.0.tar.gz"
    made = tomllib.loads(generate(Version("0.17.0"), fixture, "0" * 64, RECIPES).text)
    assert made["isa_model"] == {"x86_64": "x86-dispatch-2tier", "aarch64": "arm-bf16-switch"}
    onednn = made["third_party"][0]
    assert "arch" not in onednn and onednn["ref"] == "v3.10"
    assert onednn["tar_sha256"] == tomllib.loads((RECIPES / "vllm-0.16.0.toml").read_text())[
        "third_party"][0]["tar_sha256"]  # fmt: skip
    assert [p["file"] for p in made["patches"]] == ["patches/vllm-cpu-acl-max-jobs.patch"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("set(ENABLE_X86_ISA $ENV{VLLM_CPU_X86})",
          "set(ENABLE_X86_ISA $ENV{VLLM_CPU_X86})\nset(AVX10 $ENV{VLLM_CPU_AVX10})"),
         "VLLM_CPU_AVX10"),
        (("_C_AVX512\n        DESTINATION", "_C_AVX512VNNI\n        DESTINATION"),
         "'_C_AVX512VNNI'"),
        (("set(ENABLE_ARM_BF16 $ENV{VLLM_CPU_ARM_BF16})", ""), "match 0 eras"),  # I8MM alone
        (("FetchContent_Declare(\n                oneDNN",
          "FetchContent_Declare(\n                xbyak"), "downloads 'xbyak'"),
        (("requires gcc/g++ >= 12.3", "requires a newer gcc"), "g++ minimum is unknown"),
        # x86's oneDNN by URL: not the aarch64 commit for every architecture, in silence
        (("GIT_REPOSITORY https://github.com/oneapi-src/oneDNN.git\n"
          "                GIT_TAG        v3.13",
          "URL https://github.com/oneapi-src/oneDNN/archive/refs/tags/v3.14.tar.gz"),
         "downloads 'oneDNN' in a way the generator does not read (URL https://"),
        (("GIT_TAG        v3.13", "GIT_TAG        ${ONEDNN_TAG}"), "GIT_TAG ${ONEDNN_TAG}"),
        # x86's oneDNN found installed: the aarch64 commit is not every architecture's
        (("FetchContent_Declare(\n                oneDNN\n"
          "                GIT_REPOSITORY https://github.com/oneapi-src/oneDNN.git\n"
          "                GIT_TAG        v3.13",
          "find_package(oneDNN 3.13 REQUIRED"),
         "no download of oneDNN for x86_64"),
        (("check_sysctl(hw.optional.arm.FEAT_I8MM ARM_I8MM_FOUND)",
          "check_sysctl(hw.optional.arm.FEAT_I8MM ARM_I8MM_FOUND)\n"
          "    check_sysctl(hw.optional.arm.FEAT_SME ARM_SME_FOUND)"),
         "macOS sysctl names"),
    ],
)  # fmt: skip
def test_a_cmake_it_has_not_seen_is_exit_4_naming_what(
    change: tuple[str, str],
    named: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sdist = _altered("0.32.0", CPU_EXTENSION, change, tmp_path)
    out = tmp_path / "out"
    argv = ["new-recipe", "--vllm", "0.32.0", "--sdist", str(sdist), "--to", str(out)]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())  # no recipe with silent defaults


def _tiers_fails(argv: list[str]) -> tuple[int, str]:
    """A stand-in `patch`: the tiers patch fails two hunks, the others apply."""
    if argv[-1].endswith("vllm-cpu-x86-tiers.patch"):
        return 1, "checking file setup.py\nHunk #1 FAILED at 1583.\n1 out of 1 hunk FAILED\n"
    return 0, ""


def test_a_patch_that_does_not_apply_is_left_out_and_its_hunks_reported(
    fake_programs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_programs.add("patch", answer=_tiers_fails)
    sdist = SDISTS / "vllm-0.34.0.tar.gz"
    argv = ["new-recipe", "--vllm", "0.34.0", "--sdist", str(sdist), "--to", str(tmp_path)]
    assert main(argv) == 0
    made = tomllib.loads((tmp_path / "vllm-0.34.0.toml").read_text())
    assert [p["file"] for p in made["patches"]] == ["patches/vllm-cpu-acl-max-jobs.patch"]
    out = capsys.readouterr().out
    assert "vllm-cpu-x86-tiers.patch: does NOT apply" in out
    assert "setup.py: Hunk #1 FAILED at 1583." in out
    assert all("--dry-run" in call for call in fake_programs.calls)


@pytest.mark.integration
def test_a_file_the_release_lacks_is_named_in_the_patchs_failures(tmp_path: Path) -> None:
    """The real patch: a file it cannot find has no `checking file` line, so the failure is
    named from the diff's header, not charged to the file checked before it."""
    diff = tmp_path / "two-files.patch"
    diff.write_text(
        "--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-old\n+new\n"
        "--- a/vllm/gone.py\n+++ b/vllm/gone.py\n@@ -1 +1 @@\n-old\n+new\n"
    )
    [result] = dry_run([diff], SdistFiles(name="vllm-9.9.9.tar.gz", files={"setup.py": "other\n"}))
    assert not result.applies
    assert result.failures[0] == "setup.py: Hunk #1 FAILED at 1."
    assert any(f.startswith("vllm/gone.py: can't find file to patch") for f in result.failures)
    assert not any(f.startswith("setup.py: can't find") for f in result.failures)


def test_an_existing_recipe_is_kept_unless_forced(
    fake_programs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_programs.add("patch")
    out = tmp_path / "out"
    out.mkdir()
    existing = out / "vllm-0.34.0.toml"
    existing.write_text("hand-written\n")
    argv = ["new-recipe", "--vllm", "0.34.0", "--sdist", str(SDISTS / "vllm-0.34.0.tar.gz")]
    argv += ["--to", str(out)]
    assert main(argv) == 2
    assert "--force overwrites it" in capsys.readouterr().err
    assert existing.read_text() == "hand-written\n" and not fake_programs.calls
    assert main([*argv, "--force"]) == 0
    assert tomllib.loads(existing.read_text())["vllm"] == "0.34.0"
    assert [p.name for p in out.iterdir()] == ["vllm-0.34.0.toml"]  # no temporary left


def test_an_sdist_of_another_release_is_refused(tmp_path: Path) -> None:
    argv = ["new-recipe", "--vllm", "0.33.0", "--sdist", str(SDISTS / "vllm-0.34.0.tar.gz")]
    assert main([*argv, "--to", str(tmp_path)]) == 4
    assert not any(tmp_path.iterdir())


def test_a_macos_it_cannot_name_is_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = ("`macOS Sonoma` or later", "`macOS Redwood` or later")
    sdist = _altered("0.34.0", APPLE_DOCS, change, tmp_path)
    argv = ["new-recipe", "--vllm", "0.34.0", "--sdist", str(sdist), "--to", str(tmp_path / "o")]
    assert main(argv) == 4
    assert "macOS Redwood is a name this generator does not know" in capsys.readouterr().err


def _prunes(text: str) -> list[tuple[str, str | None]]:
    made = tomllib.loads(text)
    return [(entry["target"], entry.get("callers")) for entry in made.get("onednn_prune", [])]


def test_a_prune_list_goes_only_to_a_release_with_the_same_onednn_callers(
    fake_programs: Any, tmp_path: Path
) -> None:
    """0.34.0 calls oneDNN from the same code as 0.32.0, so it links the same units and takes
    0.32.0's lists; the same sdist with one changed oneDNN call takes none, and says why."""
    fake_programs.add("patch", answer=lambda argv: (0, ""))
    fixture = SDISTS / "vllm-0.34.0.tar.gz"
    same = generate(Version("0.34.0"), fixture, "0" * 64, RECIPES)
    shipped = load_recipe(RECIPES, "0.32.0")
    assert sorted(_prunes(same.text)) == sorted((p.target, p.callers) for p in shipped.onednn_prune)
    assert {callers for _, callers in _prunes(same.text)} == {
        callers_digest(sdist_callers(fixture))
    }
    assert "the same oneDNN callers" in same.text

    change = ("dnnl::memory::data_type::f32", "dnnl::memory::data_type::bf16")
    other = _altered("0.34.0", "csrc/cpu/dnnl_kernels.cpp", change, tmp_path)
    changed = generate(Version("0.34.0"), other, "0" * 64, RECIPES)
    assert _prunes(changed.text) == []
    said = [note for note in changed.notes if "prune list" in note]
    assert len(said) == len(shipped.onednn_prune)
    assert all("calls oneDNN from other code" in note for note in said)
