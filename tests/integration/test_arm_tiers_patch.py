"""The recipe patch for the Arm portable wheel, run as vLLM would run it (its Python hunks).

The loader hunk of vllm-0.32-cpu-arm-tiers.patch is executed against a package of real shared
libraries named like the two Arm tiers, with the CPU's HWCAP2 word given (a stand-in getauxval)
or read for real, as vLLM reads it.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Logger, new_side, tiers_loaded

pytestmark = pytest.mark.integration  # compiles the stand-in tier libraries with gcc

PATCH = (
    Path(__file__).resolve().parents[2] / "recipes" / "patches" / "vllm-0.32-cpu-arm-tiers.patch"
)
AT_HWCAP2 = 26
BF16, I8MM = 1 << 14, 1 << 13  # the kernel's HWCAP2_BF16, HWCAP2_I8MM (arm64 uapi hwcap.h)
ARM_BRANCH = "        elif Platform.get_cpu_architecture() == CpuArchEnum.ARM"


def _loader() -> Callable[..., None]:
    """The Arm branch of the patched CpuPlatform.import_kernels() as a function."""
    body = new_side(PATCH, "vllm/platforms/cpu.py")
    start = next(i for i, line in enumerate(body) if line.startswith(ARM_BRANCH))
    end = body.index("        else:", start)
    source = "\n".join(
        ["def import_kernels(Platform, CpuArchEnum, sys, logger):", "        if False:",
         "            pass", *body[start:end]]
    )  # fmt: skip
    namespace: dict[str, Any] = {}
    exec(compile(source, str(PATCH), "exec"), namespace)
    return namespace["import_kernels"]  # type: ignore[no-any-return]


def _run_loader(logger: Logger) -> None:
    arm = types.SimpleNamespace(ARM="arm")
    platform = types.SimpleNamespace(get_cpu_architecture=lambda: arm.ARM)
    _loader()(platform, arm, types.SimpleNamespace(platform="linux"), logger)


@pytest.fixture
def hwcap2(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """The CPU's AT_HWCAP2 as the loader's getauxval answers it."""

    def cpu_with(word: int) -> None:
        def getauxval(kind: int) -> int:
            return word if kind == AT_HWCAP2 else 0

        libc = types.SimpleNamespace(getauxval=getauxval)
        fake = types.SimpleNamespace(CDLL=lambda name: libc, c_ulong=ctypes.c_ulong)
        monkeypatch.setitem(sys.modules, "ctypes", fake)

    return cpu_with


@pytest.mark.parametrize(
    ("tiers", "word", "loaded"),
    [
        # Graviton3/4, Neoverse V1/V2/N2, GB10: BF16 and I8MM
        (("_C", "_C_ARM_BF16I8MM"), BF16 | I8MM, "_C_ARM_BF16I8MM.abi3.so"),
        # Neoverse N1, Graviton2, Ampere Altra: neither
        (("_C", "_C_ARM_BF16I8MM"), 0, "_C.abi3.so"),
        # BF16 without I8MM: the BF16 + I8MM library would die by SIGILL
        (("_C", "_C_ARM_BF16I8MM"), BF16, "_C.abi3.so"),
        (("_C", "_C_ARM_BF16I8MM"), I8MM | (1 << 1), "_C.abi3.so"),
        # a one-library wheel (neon, bf16i8mm, upstream's): its _C, as before
        (("_C",), BF16 | I8MM, "_C.abi3.so"),
        (("_C_ARM_BF16I8MM",), BF16 | I8MM, "_C_ARM_BF16I8MM.abi3.so"),
    ],
)
def test_the_best_tier_the_wheel_has_and_the_cpu_runs_is_loaded(
    wheel_with: Callable[..., Path],
    hwcap2: Callable[[int], None],
    tiers: tuple[str, ...],
    word: int,
    loaded: str,
) -> None:
    package, logger = wheel_with(*tiers), Logger()
    hwcap2(word)
    _run_loader(logger)
    assert tiers_loaded(package) == [loaded]
    # a tier library defines no Python module: the error vLLM ignores, except for _C
    assert bool(logger.warnings) == (loaded == "_C.abi3.so")


def test_a_wheel_for_a_better_cpu_is_refused_clearly(
    wheel_with: Callable[..., Path], hwcap2: Callable[[int], None]
) -> None:
    package = wheel_with("_C_ARM_BF16I8MM")
    hwcap2(BF16)
    with pytest.raises(RuntimeError, match="no CPU kernels that this CPU can run: it can run _C"):
        _run_loader(Logger())
    assert tiers_loaded(package) == []


def _auxv_hwcap2() -> int:
    """AT_HWCAP2 read from /proc/self/auxv (pairs of unsigned longs), not through getauxval."""
    data = Path("/proc/self/auxv").read_bytes()
    size = struct.calcsize("@L")
    words = struct.unpack(f"@{len(data) // size}L", data[: len(data) // size * size])
    pairs = dict(zip(words[::2], words[1::2], strict=True))
    return pairs.get(AT_HWCAP2, 0)


def test_the_real_getauxval_is_asked(wheel_with: Callable[..., Path]) -> None:
    """With the real ctypes: the loader's getauxval agrees with the kernel's auxv here (on
    x86_64 the Arm bits are never set, so it loads _C)."""
    package = wheel_with("_C", "_C_ARM_BF16I8MM")
    _run_loader(Logger())
    both = _auxv_hwcap2() & (BF16 | I8MM) == BF16 | I8MM
    assert tiers_loaded(package) == ["_C_ARM_BF16I8MM.abi3.so" if both else "_C.abi3.so"]


@pytest.mark.parametrize(
    ("setting", "modules"),
    [
        (None, ["vllm._C"]),
        ("_C,_C_ARM_BF16I8MM", ["vllm._C", "vllm._C_ARM_BF16I8MM"]),
        ("_C_ARM_BF16I8MM", ["vllm._C_ARM_BF16I8MM"]),
    ],
)
def test_setup_builds_the_arm_tiers_asked_for(
    setting: str | None, modules: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = new_side(PATCH, "setup.py")
    start = body.index("    else:")
    end = next(i for i, line in enumerate(body) if "vllm.{arm_tier}" in line)
    source = "\n".join(
        ["def extensions():", "    ext_modules = []", "    if False:", "        pass",
         *body[start : end + 1], "    return ext_modules"]
    )  # fmt: skip
    if setting is None:
        monkeypatch.delenv("VLLM_CPU_ARM_TIERS", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_ARM_TIERS", setting)
    namespace: dict[str, Any] = {"os": __import__("os"), "CMakeExtension": lambda name: name}
    exec(compile(source, str(PATCH), "exec"), namespace)
    assert namespace["extensions"]() == modules


@pytest.mark.parametrize(
    ("cpu_bf16", "library_has_conv", "expected"),
    [(True, True, True), (True, False, False), (False, True, False)],
)
def test_the_bf16_conv_path_needs_the_kernels_loaded(
    cpu_bf16: bool, library_has_conv: bool, expected: bool
) -> None:
    """A CPU with BF16 but no I8MM loads the portable _C, which has no BF16 conv kernels."""
    body = new_side(PATCH, "vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py")
    start = body.index("def is_arm_bf16() -> bool:")
    end = body.index("    )", start)
    ops = types.SimpleNamespace(**({"causal_conv1d_fwd_cpu": object()} if library_has_conv else {}))
    arm = types.SimpleNamespace(ARM="arm")
    namespace: dict[str, Any] = {
        "current_platform": types.SimpleNamespace(get_cpu_architecture=lambda: arm.ARM),
        "CpuArchEnum": arm,
        "torch": types.SimpleNamespace(
            cpu=types.SimpleNamespace(get_capabilities=lambda: {"bf16": cpu_bf16}),
            ops=types.SimpleNamespace(_C=ops),
        ),
    }
    exec(compile("\n".join(body[start : end + 1]), str(PATCH), "exec"), namespace)
    assert namespace["is_arm_bf16"]() is expected
