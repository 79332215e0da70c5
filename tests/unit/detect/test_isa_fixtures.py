"""Real /proc/cpuinfo dumps are classified as the machines they came from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolchain.detect.isa import isa_table
from toolchain.detect.proc_cpuinfo import parse_cpuinfo
from toolchain.detect.uarch import microarchitecture

CPUINFO = Path(__file__).resolve().parents[2] / "fixtures" / "cpuinfo"

X86_ALL = (
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
)
AVX512_BASE = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq")
ARM_NEON_DOT = ("asimd", "fp16", "dotprod")

# fixture: (arch, features that must be true (all others false), isa level, Arm core)
EXPECTED = {
    "x86-sapphirerapids": ("x86_64", X86_ALL, "x86-64-v4", None),
    "x86-skylake-avx512": ("x86_64", AVX512_BASE, "x86-64-v4", None),
    "x86-cascadelake": ("x86_64", (*AVX512_BASE, "avx512_vnni"), "x86-64-v4", None),
    "x86-zen4": ("x86_64", (*AVX512_BASE, "avx512_vnni", "avx512_bf16"), "x86-64-v4", None),
    "x86-epyc-kvm-buildhost": (
        "x86_64",
        (*AVX512_BASE, "avx512_vnni", "avx512_bf16"),
        "x86-64-v4",
        None,
    ),
    "x86-haswell": ("x86_64", ("avx2", "fma", "f16c"), "x86-64-v3", None),
    # Lists avx_vnni, which is not avx512_vnni.
    "x86-alderlake": ("x86_64", ("avx2", "fma", "f16c"), "x86-64-v3", None),
    "arm-graviton2": ("aarch64", ARM_NEON_DOT, "Neoverse-N1", "Neoverse-N1"),
    # Armv8.0: NEON without FP16 or dot product.
    "arm-cortex-a72": ("aarch64", ("asimd",), "Cortex-A72", "Cortex-A72"),
    # Lists svebf16 and svei8mm beside bf16 and i8mm, and sve without sve2.
    "arm-graviton3": (
        "aarch64",
        (*ARM_NEON_DOT, "bf16", "i8mm", "sve"),
        "Neoverse-V1",
        "Neoverse-V1",
    ),
    "arm-neoverse-v2": (
        "aarch64",
        (*ARM_NEON_DOT, "bf16", "i8mm", "sve", "sve2"),
        "Neoverse-V2",
        "Neoverse-V2",
    ),
    "arm-asahi-m1": ("aarch64", ARM_NEON_DOT, "Apple M1 (Icestorm)", "Apple M1 (Icestorm)"),
    "ppc64le-power9": ("ppc64le", (), "ppc64le", None),
    "riscv64-spacemit-x60": ("riscv64", (), "riscv64", None),
}


def test_every_fixture_has_an_expectation() -> None:
    assert {path.stem for path in CPUINFO.glob("*.txt")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_is_classified(name: str) -> None:
    arch, true_features, level, core = EXPECTED[name]
    cpu = parse_cpuinfo((CPUINFO / f"{name}.txt").read_text())
    table = isa_table()
    flags = table.feature_flags(cpu.arch, cpu.tokens)
    assert cpu.arch == arch
    assert {feature for feature, on in flags.items() if on} == set(true_features)
    assert set(flags) == set(table.feature_names)
    if arch == "x86_64":
        assert table.x86_level(cpu.tokens) == level
    if arch == "aarch64":
        assert table.arm_core(cpu.arm_implementer, cpu.arm_part) == core


@pytest.mark.parametrize(
    ("tokens", "feature"),
    [
        ("amx_bf16 amx_tile", "avx512_bf16"),
        ("avx512_bf16", "amx_bf16"),
        ("avx_vnni", "avx512_vnni"),
        ("avx512_vnni", "amx_int8"),
    ],
)
def test_x86_names_are_matched_whole(tokens: str, feature: str) -> None:
    text = f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: lm {tokens}\n"
    cpu = parse_cpuinfo(text)
    assert isa_table().feature_flags(cpu.arch, cpu.tokens)[feature] is False


@pytest.mark.parametrize(
    ("tokens", "feature"),
    [
        ("svebf16 svei8mm", "bf16"),
        ("svebf16 svei8mm", "i8mm"),
        ("sve svebf16", "sve2"),
        ("sve2", "sve"),
        ("fphp", "fp16"),
    ],
)
def test_arm_names_are_matched_whole(tokens: str, feature: str) -> None:
    text = f"processor\t: 0\nFeatures\t: fp asimd {tokens}\nCPU implementer\t: 0x41\n"
    cpu = parse_cpuinfo(text)
    assert isa_table().feature_flags(cpu.arch, cpu.tokens)[feature] is False


def test_a_feature_missing_on_one_processor_is_missing() -> None:
    # A mixed host: only what every processor lists can be relied on.
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: lm avx2 avx512f\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: lm avx2\n"
    )
    cpu = parse_cpuinfo(text)
    assert cpu.processors == 2
    assert isa_table().feature_flags(cpu.arch, cpu.tokens)["avx512f"] is False
    assert isa_table().feature_flags(cpu.arch, cpu.tokens)["avx2"] is True


# archspec's names: what users know; None where vLLM's CPU backend does not run.
MICROARCHITECTURE = {
    "x86-sapphirerapids": "sapphirerapids",
    "x86-skylake-avx512": "skylake_avx512",
    "x86-cascadelake": "cascadelake",
    "x86-zen4": "zen4",
    "x86-haswell": "haswell",
    "x86-alderlake": "alderlake",
    # KVM hides flags zen4 needs from this guest: archspec says no more than the level.
    "x86-epyc-kvm-buildhost": "x86_64_v4",
    "arm-graviton2": "neoverse_n1",
    "arm-graviton3": "neoverse_v1",
    "arm-neoverse-v2": "neoverse_v2",
    "arm-asahi-m1": "m1",
    # archspec's cortex_a72 wants the crypto extension, which a Raspberry Pi 4 lacks: our core
    # table names it rather than archspec's generic "aarch64".
    "arm-cortex-a72": "cortex_a72",
    "ppc64le-power9": None,
    "riscv64-spacemit-x60": None,
}


@pytest.mark.parametrize("name", sorted(MICROARCHITECTURE))
def test_fixture_gets_its_microarchitecture_name(name: str) -> None:
    cpu = parse_cpuinfo((CPUINFO / f"{name}.txt").read_text())
    core = isa_table().arm_core(cpu.arm_implementer, cpu.arm_part)
    assert microarchitecture(cpu, core) == MICROARCHITECTURE[name]


def test_an_arm_part_archspec_does_not_know_is_named_from_our_table() -> None:
    """By features alone a Neoverse-V3 passes for archspec's neoverse_v2."""
    v2 = parse_cpuinfo((CPUINFO / "arm-neoverse-v2.txt").read_text())
    v3 = dataclasses.replace(v2, arm_part="0xd84")
    assert microarchitecture(v3, isa_table().arm_core("0x41", "0xd84")) == "neoverse_v3"


@pytest.mark.parametrize(
    ("implementer", "part", "name"),
    [("0xc0", "0xac4", "AmpereOne-A"), ("0x43", "0x0af", "ThunderX2"),
     ("0x4e", "0x010", "NVIDIA Olympus"), ("0x41", "0xd84", "Neoverse-V3")],
)  # fmt: skip
def test_the_arm_core_table_covers_archspec_and_more(
    implementer: str, part: str, name: str
) -> None:
    assert isa_table().arm_core(implementer, part) == name


def test_every_arm_part_archspec_knows_is_in_our_table() -> None:
    from archspec.cpu import TARGETS, detect

    vendors = {v: k for k, v in detect.TARGETS_JSON["conversions"]["arm_vendors"].items()}
    known = {
        f"{vendors[t.vendor]}:{t.cpu_part}"
        for t in TARGETS.values()
        if t.family.name == "aarch64" and t.cpu_part.startswith("0x")
    }
    assert known <= set(isa_table().arm_cores)
