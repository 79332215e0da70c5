"""Kernel libraries load in child processes; SIGILL becomes 'this CPU lacks ...'."""

from __future__ import annotations

from pathlib import Path

from toolchain.verify.kernels import describe, load_kernels

AVX512_HOST = {
    "avx2": True,
    "f16c": True,
    "avx512f": True,
    "avx512bw": True,
    "avx512vl": True,
    "avx512dq": True,
    "avx512_bf16": True,
    "avx512_vnni": True,
}


def _package(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "site-packages" / "vllm"
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"\x7fELF")
    return folder


def test_unavailable_tier_is_sigill_with_the_missing_features(
    tmp_path: Path, fake_programs
) -> None:
    folder = _package(tmp_path, "_C.abi3.so", "_C_AVX512.abi3.so", "_C_AVX2.abi3.so")

    def python(argv: list[str]) -> tuple[int, str]:
        return (-4, "") if argv[-1].endswith("/_C.abi3.so") else (0, "")

    fake_programs.add("python", answer=python)
    results = load_kernels(fake_programs.folder / "python", folder, arch="x86_64", isa=AVX512_HOST)
    by_tier = {r.tier: r for r in results}
    assert by_tier["_C_AVX2"].status == by_tier["_C_AVX512"].status == "ok"
    assert by_tier["_C"].status == "sigill"
    assert by_tier["_C"].lacking == ("amx_bf16", "amx_tile")
    assert "this CPU lacks amx_bf16, amx_tile" in describe(by_tier["_C"])


def test_exit_132_counts_as_sigill_and_other_failures_as_errors(
    tmp_path: Path, fake_programs
) -> None:
    folder = _package(tmp_path, "_C.abi3.so", "_C_AVX2.abi3.so")

    def python(argv: list[str]) -> tuple[int, str]:
        return (132, "") if "_C.abi3" in argv[-1] else (1, "OSError: libnuma.so.1: cannot open")

    fake_programs.add("python", answer=python)
    results = load_kernels(
        fake_programs.folder / "python",
        folder,
        arch="aarch64",
        isa={},
        wheel_min_isa=("asimd", "bf16"),
    )
    by_tier = {r.tier: r for r in results}
    assert by_tier["_C"].status == "sigill" and by_tier["_C"].lacking == ("asimd", "bf16")
    assert by_tier["_C_AVX2"].status == "error"
    assert "libnuma.so.1" in describe(by_tier["_C_AVX2"])


def test_the_arm_portable_wheel_s_bf16_library_names_what_a_neoverse_n1_lacks(
    tmp_path: Path, fake_programs
) -> None:
    """Its _C needs what the wheel needs (the baseline); _C_ARM_BF16I8MM needs BF16 and I8MM."""
    folder = _package(tmp_path, "_C.abi3.so", "_C_ARM_BF16I8MM.abi3.so")

    def python(argv: list[str]) -> tuple[int, str]:
        return (-4, "") if "_C_ARM_BF16I8MM" in argv[-1] else (0, "")

    fake_programs.add("python", answer=python)
    n1 = dict.fromkeys(["asimd", "fp16", "dotprod"], True)
    results = load_kernels(
        fake_programs.folder / "python",
        folder,
        arch="aarch64",
        isa=n1,
        wheel_min_isa=("asimd", "fp16", "dotprod"),
    )
    by_tier = {r.tier: r for r in results}
    assert by_tier["_C"].status == "ok"
    assert by_tier["_C_ARM_BF16I8MM"].status == "sigill"
    assert by_tier["_C_ARM_BF16I8MM"].lacking == ("bf16", "i8mm")
