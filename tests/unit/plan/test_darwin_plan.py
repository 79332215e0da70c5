"""Plans for Apple Silicon Macs from their saved sysctl and vm_stat, on this Linux host.

`plan --json` of each case is pinned in tests/fixtures/plans/darwin-*.json; to accept an intended
change, rerun with WRITE_GOLDEN_PLANS=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import DataFileError
from toolchain.plan.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
M1PRO = ("mac-m1pro-monterey", "mac-16g-partial")
M2 = ("mac-m2-monterey", "mac-16g-partial")
M4MAX = ("mac-m4max-sequoia", "mac-m5pro-48g")
CASES = {
    "darwin-m1pro-0.32.0": (M1PRO, ["--vllm", "0.32.0"]),
    "darwin-m4max-0.32.0-sources": (M4MAX, ["--vllm", "0.32.0", "--sources", "/mirror"]),
    "darwin-m2-0.16.0-python3.12": (M2, ["--vllm", "0.16.0", "--python", "3.12"]),
}


def plan(
    tmp_path: Path, dumps: tuple[str, str], argv: list[str], *, sysctl: Path | None = None
) -> list[str]:
    return [
        "plan",
        "--sysctl",
        str(sysctl or FIXTURES / "sysctl" / f"{dumps[0]}.txt"),
        "--vm-stat",
        str(FIXTURES / "vm_stat" / f"{dumps[1]}.txt"),
        "--recipes",
        str(ROOT / "recipes"),
        "--work-dir",
        str(tmp_path / "work"),
        *argv,
    ]


@pytest.fixture(autouse=True)
def no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in [v for v in os.environ if v.startswith("VCB_")] + ["CXX", "MAX_JOBS"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./pyproject.toml settings
    # the goldens were written on an x86_64 Linux machine planning for a Mac
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: "x86_64")


@pytest.mark.parametrize("case", sorted(CASES))
def test_darwin_plan_json_is_unchanged(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dumps, argv = CASES[case]
    code = main([*plan(tmp_path, dumps, argv), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    text = out.replace(str(tmp_path), "<tmp>").replace(str(ROOT), "<repo>")
    golden = FIXTURES / "plans" / f"{case}.json"
    if os.environ.get("WRITE_GOLDEN_PLANS"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_the_mac_decides_the_target_and_the_wheel_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plans = {}
    for name, dumps in (("m1", M1PRO), ("m4", M4MAX)):
        assert main([*plan(tmp_path, dumps, ["--vllm", "0.32.0"]), "--json"]) == 0
        plans[name] = json.loads(capsys.readouterr().out)
    assert [plans[m]["target_isa"] for m in ("m1", "m4")] == ["neon", "bf16i8mm"]
    m4 = plans["m4"]
    assert m4["macos"]["wheel_platform"] == "macosx_14_0_arm64"
    assert m4["macos"]["march"] == "armv8.2-a+bf16+dotprod+fp16+i8mm"
    assert m4["torch"]["requirement"] == "torch==2.13.0"  # PyPI's build: no +cpu on macOS
    assert m4["compiler"]["cxx"] == "/usr/bin/clang++"
    assert m4["third_party"] == [] and m4["onednn_isa"] is None
    assert "VLLM_CPU_ARM_BF16" not in m4["env"]  # not read on macOS: the Mac's sysctl decides
    assert m4["env"]["_PYTHON_HOST_PLATFORM"] == "macosx-14.0-arm64"
    # 18.5 GiB available, 3.74 GiB per job, 0.5 GiB reserve: 4 jobs of 16 CPUs; the M1 Pro: 1
    assert (m4["max_jobs"], plans["m1"]["max_jobs"]) == (4, 1)
    assert not any(p["arch"] for p in m4["patches"])  # Linux's arch patches (ACL) left out


def test_a_target_the_mac_does_not_build_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(plan(tmp_path, M1PRO, ["--vllm", "0.32.0", "--target", "bf16i8mm"]))
    err = capsys.readouterr().err
    assert code == 5
    assert "takes bf16 and i8mm from the build Mac's sysctl" in err
    assert "this Mac builds neon, not bf16i8mm" in err


@pytest.mark.parametrize(("version", "code"), [("13.6.1", 5), ("15.3.1", 0)])
def test_the_macos_version_of_the_dump_is_checked(
    version: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "with-version.sysctl"  # a fixture plus the line `sysctl -a` would add
    original = (FIXTURES / "sysctl" / f"{M2[0]}.txt").read_text()
    dump.write_text(original + f"kern.osproductversion: {version}\n")
    assert main([*plan(tmp_path, M2, ["--vllm", "0.32.0"], sysctl=dump), "--json"]) == code
    out, err = capsys.readouterr()
    if code:
        assert f"the Mac runs macOS {version}; vLLM 0.32.0 on macOS needs 14.0 or newer" in err
        return
    data = json.loads(out)
    assert data["macos"]["build_macos"] == version
    assert data["macos"]["wheel_platform"] == "macosx_14_0_arm64"
    assert not [w for w in data["warnings"] if "kern.osproductversion" in w]


def test_an_intel_mac_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "intel.sysctl"
    dump.write_text(
        "hw.ncpu: 8\nhw.memsize: 17179869184\nhw.optional.x86_64: 1\n"
        "hw.optional.avx2_0: 1\nmachdep.cpu.brand_string: Intel(R) Core(TM) i7\n"
    )
    vm_stat = ("", "mac-intel-4k")
    assert main(plan(tmp_path, vm_stat, ["--vllm", "0.32.0"], sysctl=dump)) == 3
    assert "builds on macOS only for Apple Silicon" in capsys.readouterr().err


def test_build_wheel_for_a_mac_is_refused_here_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = plan(tmp_path, M4MAX, ["--vllm", "0.32.0"])
    assert main(["build-wheel", *argv[1:]]) == 3
    assert "no cross build to macOS" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('macos_min = "14.0"', 'macos_min = "Sonoma"', "[darwin]: key 'macos_min'"),
        ('isa_model = "apple-sysctl"', 'isa_model = "x86-dispatch"', "[darwin]: key 'isa_model'"),
        ('clang_min = "15.0"', 'xcode = "15.4"', "[darwin]: unknown keys ['xcode']"),
    ],
)
def test_a_malformed_darwin_table_is_named(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    folder = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", folder)
    recipe = folder / "vllm-0.32.0.toml"
    recipe.write_text(recipe.read_text().replace(old, new, 1))
    with pytest.raises(DataFileError) as caught:
        load_recipe(folder, "0.32.0")
    assert str(recipe) in caught.value.message and expected in caught.value.message


def test_every_shipped_recipe_pins_the_torch_its_sdist_names_for_darwin() -> None:
    """requirements/build/cpu.txt of each sdist: torch==X where platform_system == "Darwin"."""
    pins = {v: load_recipe(ROOT / "recipes", v).darwin for v in ("0.16.0", "0.32.0", "0.34.0")}
    assert {v: d.torch for v, d in pins.items() if d} == {
        "0.16.0": "2.10.0",
        "0.32.0": "2.13.0",
        "0.34.0": "2.14.0",
    }


def test_settings_a_mac_plan_cannot_use_are_said_to_be_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--vllm", "0.32.0", "--cxx", "g++-14", "--allow-cuda-torch", "--precompiled-headers",
            "--torch-headers", "lean", "--opt-level", "O2"]  # fmt: skip
    assert main([*plan(tmp_path, M2, argv), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["compiler"]["cxx"] == "/usr/bin/clang++"
    ignored = [w for w in data["warnings"] if "is ignored for a macOS plan" in w]
    assert [w.split(" (")[0] for w in ignored] == [
        "--cxx / CXX",
        "--allow-cuda-torch",
        "--precompiled-headers",
        "--torch-headers lean",
        "--opt-level",
    ]
    assert data["torch"]["requirement"] == "torch==2.13.0" and data["torch_headers"] == "full"
    assert data["opt_level"] == "O3"  # Release's own
    # the lean header and -O2 by default are not the user's word: nothing said
    assert main([*plan(tmp_path, M2, ["--vllm", "0.32.0"]), "--json"]) == 0
    warned = json.loads(capsys.readouterr().out)["warnings"]
    assert not any("--torch-headers" in w or "--opt-level" in w for w in warned)
