"""`plan --json` is pinned byte for byte: restructuring the code must not change a plan.

The golden files were written by the code before the restructuring (issue #11); to accept an
intended change, rerun with WRITE_GOLDEN_PLANS=1 and review the diff of tests/fixtures/plans/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import toolchain
from toolchain.cli import main

ROOT = Path(__file__).resolve().parents[3]
# the package's own files (toolchain/data/*.cmake) live where it is installed: nox's session
# installs it into its venv, not the checkout
PACKAGE = Path(toolchain.__file__).resolve().parent
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = FIXTURES / "plans"

# case: (cpuinfo of the machine described, meminfo, g++ on PATH, arguments, build machine)
CASES = {
    "zen4-0.32.0-provisioned-mirror": (
        "x86-zen4",
        "buildhost-24g",
        {"g++": "12.2.0\n"},
        ["--vllm", "0.32.0", "--sources", "/mirror"],
        "x86_64",
    ),
    "zen4-0.16.0-path-gxx-no-mirror": (
        "x86-zen4",
        "buildhost-24g",
        {"g++": "12.2.0\n", "g++-13": "13.2.0\n"},
        ["--vllm", "0.16.0"],
        "x86_64",
    ),
    "graviton3-0.32.0-cxx-source-dir": (
        "arm-graviton3",
        "buildhost-24g",
        {"g++": "12.2.0\n", "g++-14": "14.2.0\n"},
        [
            "--vllm",
            "0.32.0",
            # a tree built as it is: portable would need it to read VLLM_CPU_ARM_TIERS
            "--target",
            "bf16i8mm",
            "--cxx",
            "g++-14",  # must exist since the plan checks it (issue #12)
            "--jobs",
            "4",
            "--source-dir",
            "/src/vllm",
            "--find-links",
            "/wheels/a:/wheels/b",
            "--torch-index",
            "http://mirror.internal/torch/cpu",
        ],
        "aarch64",
    ),
    "seed-vm-haswell-0.34.0": (
        "x86-haswell",
        "seed-6cpu-7.75g",
        {"g++": "12.2.0\n", "g++-14": "14.2.0\n"},
        ["--vllm", "0.34.0", "--sources", "/mirror", "--python", "3.12", "--reserve-mib", "256"],
        "x86_64",
    ),
    # issue #29: an x86_64 build machine cross-compiles aarch64 wheels
    "x86-buildhost-0.32.0-cross-bf16i8mm": (
        "x86-epyc-kvm-buildhost",
        "buildhost-24g",
        {"g++": "12.2.0\n"},
        ["--vllm", "0.32.0", "--target", "bf16i8mm", "--sources", "/mirror"],
        "x86_64",
    ),
    # issue #29 item 8: the Arm portable wheel (two kernel libraries), cross-compiled
    "x86-buildhost-0.32.0-cross-portable": (
        "x86-epyc-kvm-buildhost",
        "buildhost-24g",
        {"g++": "12.2.0\n"},
        ["--vllm", "0.32.0", "--target", "portable", "--arch", "aarch64", "--sources", "/mirror"],
        "x86_64",
    ),
    "graviton3-described-on-x86-0.32.0-cross": (
        "arm-graviton3",
        "buildhost-24g",
        {"g++": "12.2.0\n"},
        ["--vllm", "0.32.0", "--sources", "/mirror"],
        "x86_64",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_json_is_unchanged(
    case: str, tmp_path: Path, fake_programs, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    cpuinfo, meminfo, compilers, argv, build_arch = CASES[case]
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: build_arch)
    monkeypatch.setattr("toolchain.detect.host.usable_cpus", lambda: (2, None))
    monkeypatch.setattr("toolchain.compile.preflight.free_bytes", lambda where: 50 * 1024**3)
    for name, version in {**compilers, "ccache": "ccache version 4.7.5\n"}.items():
        fake_programs.add(name, version)
    for python in ("python3.11", "python3.12"):
        fake_programs.add(python, "")
    for variable in [v for v in os.environ if v.startswith("VCB_")] + ["CXX", "MAX_JOBS"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./pyproject.toml settings
    code = main(
        [
            "plan",
            "--json",
            "--cpuinfo",
            str(FIXTURES / "cpuinfo" / f"{cpuinfo}.txt"),
            "--meminfo",
            str(FIXTURES / "meminfo" / f"{meminfo}.txt"),
            "--recipes",
            str(ROOT / "recipes"),
            "--work-dir",
            str(tmp_path / "work"),
            *argv,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    text = (
        out.replace(str(tmp_path), "<tmp>")
        .replace(str(PACKAGE), "<repo>/toolchain")
        .replace(str(ROOT), "<repo>")
    )
    golden = GOLDEN / f"{case}.json"
    if os.environ.get("WRITE_GOLDEN_PLANS"):
        golden.write_text(text)
    assert text == golden.read_text()
