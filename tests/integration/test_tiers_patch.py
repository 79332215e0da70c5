"""The recipe patch for lean x86 wheels, run as vLLM would run it (its Python hunks, for real).

The loader hunk of vllm-cpu-x86-tiers.patch is executed against a package of real shared
libraries named like vLLM's tiers, with a CPU that has more, or less, than the wheel was built for.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Logger, new_side, tiers_loaded

pytestmark = pytest.mark.integration  # compiles the stand-in tier libraries with gcc

PATCH = Path(__file__).resolve().parents[2] / "recipes" / "patches" / "vllm-cpu-x86-tiers.patch"


def _loader() -> Callable[..., None]:
    """The x86 branch of the patched CpuPlatform.import_kernels() as a function."""
    body = new_side(PATCH, "vllm/platforms/cpu.py")
    end = body.index("        else:")
    source = "def import_kernels(torch, logger):\n        if True:\n" + "\n".join(body[:end])
    namespace: dict[str, Any] = {}
    exec(compile(source, str(PATCH), "exec"), namespace)
    return namespace["import_kernels"]  # type: ignore[no-any-return]


def _cpu(*, avx512: bool, bf16: bool, amx: bool = False) -> types.SimpleNamespace:
    cpu = types.SimpleNamespace(
        _is_avx512_supported=lambda: avx512,
        _is_avx512_bf16_supported=lambda: bf16,
        _is_amx_tile_supported=lambda: amx,
    )
    return types.SimpleNamespace(cpu=cpu)


@pytest.mark.parametrize(
    ("tiers", "avx512", "bf16", "loaded"),
    [
        # an AVX-512 BF16 host with a wheel of every tier: _C, as upstream
        (("_C", "_C_AVX512", "_C_AVX2"), True, True, "_C.abi3.so"),
        # an AVX-512 host with an avx2 wheel: the AVX2 tier (upstream would look for _C_AVX512)
        (("_C_AVX2",), True, False, "_C_AVX2.abi3.so"),
        (("_C_AVX2",), True, True, "_C_AVX2.abi3.so"),
        # an AVX-512 BF16 host with an avx512 wheel
        (("_C_AVX512",), True, True, "_C_AVX512.abi3.so"),
        (("_C_AVX512", "_C_AVX2"), False, False, "_C_AVX2.abi3.so"),
    ],
)
def test_the_best_tier_the_wheel_has_and_the_cpu_runs_is_loaded(
    wheel_with: Callable[..., Path], tiers: tuple[str, ...], avx512: bool, bf16: bool, loaded: str
) -> None:
    package, logger = wheel_with(*tiers), Logger()
    _loader()(_cpu(avx512=avx512, bf16=bf16), logger)
    assert tiers_loaded(package) == [loaded]
    # a tier library defines no Python module: the error vLLM ignores, except for _C
    assert bool(logger.warnings) == (loaded == "_C.abi3.so")


def test_a_wheel_for_a_better_cpu_is_refused_clearly(wheel_with: Callable[..., Path]) -> None:
    package = wheel_with("_C_AVX512")
    with pytest.raises(
        RuntimeError, match="no CPU kernels that this CPU can run: it can run _C_AVX2"
    ):
        _loader()(_cpu(avx512=False, bf16=False), Logger())
    assert tiers_loaded(package) == []


@pytest.mark.parametrize(
    ("setting", "modules"),
    [
        (None, ["vllm._C", "vllm._C_AVX512", "vllm._C_AVX2"]),
        ("_C_AVX2", ["vllm._C_AVX2"]),
        ("_C,_C_AVX2", ["vllm._C", "vllm._C_AVX2"]),
    ],
)
def test_setup_builds_the_tiers_asked_for(
    setting: str | None, modules: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = new_side(PATCH, "setup.py")
    start = body.index('    if platform.machine() in ("x86_64", "AMD64"):')
    end = body.index("    else:", start)
    source = "\n".join(
        ["def extensions():", "    ext_modules = []", *body[start:end], "    return ext_modules"]
    )
    if setting is None:
        monkeypatch.delenv("VLLM_CPU_X86_TIERS", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_X86_TIERS", setting)
    namespace: dict[str, Any] = {
        "os": __import__("os"),
        "platform": types.SimpleNamespace(machine=lambda: "x86_64"),
        "CMakeExtension": lambda name: name,
    }
    exec(compile(source, str(PATCH), "exec"), namespace)
    assert namespace["extensions"]() == modules


def _attn_isa(cpu: types.SimpleNamespace) -> Callable[..., str]:
    """The patched _get_attn_isa() of vLLM's CPU attention backend, on an x86 CPU."""
    body = new_side(PATCH, "vllm/v1/attention/backends/cpu_attn.py")
    start = body.index("def _get_attn_isa(")
    end = body.index('        return "vec16"', body.index("    elif block_size % 32 == 0:"))
    x86 = types.SimpleNamespace(
        X86="x86", ARM="arm", S390X="s390x", RISCV="riscv", POWERPC="powerpc"
    )
    namespace: dict[str, Any] = {
        "torch": types.SimpleNamespace(dtype=object, bfloat16="bf16", cpu=cpu.cpu),
        "current_platform": types.SimpleNamespace(get_cpu_architecture=lambda: x86.X86),
        "CpuArchEnum": x86,
        "is_quantized_kv_cache": lambda kv_cache_dtype: kv_cache_dtype.startswith("fp8"),
        "_riscv_supports_rvv": lambda: False,
    }
    exec(compile("\n".join(body[start : end + 1]), str(PATCH), "exec"), namespace)
    return namespace["_get_attn_isa"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("tiers", "amx", "kv_cache_dtype", "isa"),
    [
        # every tier, as upstream: AMX where the CPU has it, FP8 KV on AVX-512
        (("_C", "_C_AVX512", "_C_AVX2"), True, "auto", "amx"),
        (("_C", "_C_AVX512", "_C_AVX2"), False, "fp8_e4m3", "vec"),
        (("_C_AVX512",), False, "fp8_e4m3", "vec"),
        # an avx512 wheel on an AMX host: its tier has no AMX kernels
        (("_C_AVX512",), True, "auto", "vec"),
        # an avx2 wheel on an AVX-512 host, FP8 KV not asked for
        (("_C_AVX2",), True, "auto", "vec"),
    ],
)
def test_attention_uses_only_kernels_the_wheel_has(
    wheel_with: Callable[..., Path],
    tiers: tuple[str, ...],
    amx: bool,
    kv_cache_dtype: str,
    isa: str,
) -> None:
    wheel_with(*tiers)
    get_attn_isa = _attn_isa(_cpu(avx512=True, bf16=True, amx=amx))
    assert get_attn_isa("bf16", 128, 128, kv_cache_dtype) == isa


def test_an_avx2_wheel_on_an_avx512_host_refuses_an_fp8_kv_cache(
    wheel_with: Callable[..., Path],
) -> None:
    wheel_with("_C_AVX2")
    get_attn_isa = _attn_isa(_cpu(avx512=True, bf16=True, amx=True))
    with pytest.raises(NotImplementedError, match="FP8 KV cache on CPU requires x86 with AVX-512"):
        get_attn_isa("bf16", 128, 128, "fp8_e4m3")
