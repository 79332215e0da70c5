"""The native probe: its output format, how it overrules /proc/cpuinfo, and the real thing here."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.detect.probe import parse_probe_output, reconcile
from toolchain.detect.proc_cpuinfo import parse_cpuinfo

REPO = Path(__file__).resolve().parents[3]
KNOWN = "known avx2 fma f16c avx512f avx512bw avx512vl avx512dq amx_bf16 amx_tile amx_int8"


def test_parses_x86_output() -> None:
    result = parse_probe_output(
        "arch x86_64\n" + KNOWN + "\ncpuid_flags avx2 fma avx512f amx_tile amx_bf16\n"
        "flags avx2 fma amx_tile amx_bf16\nxcr0 0x60007\navx10_version 2\namx_permitted 1\n"
    )
    assert result.arch == "x86_64"
    assert result.flags == {"avx2", "fma", "amx_tile", "amx_bf16"}
    assert "avx512f" in result.cpuid_flags
    assert result.xcr0 == 0x60007
    assert result.avx10_version == 2
    assert result.amx_permitted is True


def test_amx_permission_is_unknown_without_amx() -> None:
    result = parse_probe_output("arch x86_64\ncpuid_flags avx2\nflags avx2\namx_permitted 0\n")
    assert result.amx_permitted is None


def test_hypervisor_listing_avx512_without_zmm_state_is_overruled() -> None:
    # A hypervisor passes the CPUID bit through but leaves ZMM state off in XCR0.
    probe = parse_probe_output(
        "arch x86_64\n" + KNOWN + "\ncpuid_flags avx2 fma f16c avx512f avx512bw\n"
        "flags avx2 fma f16c\nxcr0 0x7\n"
    )
    result = reconcile(probe, frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "lm"}))
    assert "avx512f" not in result.tokens
    assert "lm" in result.tokens  # tokens the probe does not check keep the kernel's word
    assert any(
        "lists avx512f" in note and "XCR0=0x7 has its register state off" in note
        for note in result.notes
    )


def test_amx_refused_by_the_kernel_is_unusable() -> None:
    probe = parse_probe_output(
        "arch x86_64\n" + KNOWN + "\ncpuid_flags avx2 amx_tile amx_bf16 amx_int8\n"
        "flags avx2 amx_tile amx_bf16 amx_int8\nxcr0 0x600e7\namx_permitted 0\n"
    )
    result = reconcile(probe, frozenset({"avx2", "amx_tile", "amx_bf16", "amx_int8"}))
    assert not result.tokens & {"amx_tile", "amx_bf16", "amx_int8"}
    assert any("refused" in note for note in result.notes)


def test_agreement_gives_no_notes() -> None:
    probe = parse_probe_output("arch x86_64\n" + KNOWN + "\ncpuid_flags avx2 fma\nflags avx2 fma\n")
    assert reconcile(probe, frozenset({"avx2", "fma"})).notes == ()


def _build_probe(build_dir: Path) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is needed to compile the probe: pip install cmake ninja")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [cmake, "-S", str(REPO), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release"],
        check=True,
        capture_output=True,
    )
    subprocess.run([cmake, "--build", str(build_dir)], check=True, capture_output=True)
    return build_dir / "cpuprobe"


@pytest.mark.compile
@pytest.mark.skipif(platform.machine() not in {"x86_64", "aarch64"}, reason="probe knows x86/Arm")
def test_real_probe_agrees_with_this_machines_cpuinfo(tmp_path: Path) -> None:
    probe_binary = _build_probe(tmp_path / "build")
    output = subprocess.run([str(probe_binary)], check=True, capture_output=True, text=True)
    probe = parse_probe_output(output.stdout)
    kernel = parse_cpuinfo(Path("/proc/cpuinfo").read_text()).tokens
    assert probe.arch == platform.machine()
    assert probe.known, "the probe named no features it checks"
    # For every feature the probe checks, it and the kernel must agree on this machine.
    disagree = {token for token in probe.known if (token in probe.flags) != (token in kernel)}
    disagree.discard("avx10")  # kernels before 6.x do not list AVX10 at all
    assert disagree == set(), f"probe and /proc/cpuinfo disagree on {sorted(disagree)}"
    assert reconcile(probe, kernel).tokens >= probe.flags
