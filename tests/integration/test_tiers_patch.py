"""The recipe patch for lean x86 wheels, run as vLLM would run it (its Python hunks, for real).

The loader hunk of vllm-cpu-x86-tiers.patch is executed against a package of real shared
libraries named like vLLM's tiers, with a CPU that has more, or less, than the wheel was built for.
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration  # compiles the stand-in tier libraries with gcc

PATCH = Path(__file__).resolve().parents[2] / "recipes" / "patches" / "vllm-cpu-x86-tiers.patch"


def _new_side(path: str) -> list[str]:
    """The patched text of `path`'s hunks (context and added lines), in order."""
    lines, inside = [], False
    for line in PATCH.read_text().splitlines():
        if line.startswith("+++ "):
            inside = line == f"+++ b/{path}"
        elif inside and line[:1] in (" ", "+") and not line.startswith("+++"):
            lines.append(line[1:])
        elif inside and line == "":
            lines.append("")
    return lines


def _loader() -> Callable[..., None]:
    """The x86 branch of the patched CpuPlatform.import_kernels() as a function."""
    body = _new_side("vllm/platforms/cpu.py")
    end = body.index("        else:")
    source = "def import_kernels(torch, logger):\n        if True:\n" + "\n".join(body[:end])
    namespace: dict[str, Any] = {}
    exec(compile(source, str(PATCH), "exec"), namespace)
    return namespace["import_kernels"]  # type: ignore[no-any-return]


class Logger:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning_once(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


def _cpu(*, avx512: bool, bf16: bool) -> types.SimpleNamespace:
    cpu = types.SimpleNamespace(
        _is_avx512_supported=lambda: avx512, _is_avx512_bf16_supported=lambda: bf16
    )
    return types.SimpleNamespace(cpu=cpu)


@pytest.fixture
def wheel_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """A `vllm` package holding real (empty) tier libraries, importable from now on."""

    def make(*tiers: str) -> Path:
        package = tmp_path / "site" / "vllm"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        source = tmp_path / "empty.c"
        source.write_text("int vcb_tier_marker(void) { return 1; }\n")
        for tier in tiers:
            subprocess.run(
                ["gcc", "-shared", "-fPIC", "-o", package / f"{tier}.abi3.so", source], check=True
            )
        monkeypatch.syspath_prepend(str(package.parent))
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            monkeypatch.delitem(sys.modules, name)
        return package

    return make


def _loaded(package: Path) -> list[str]:
    maps = Path("/proc/self/maps").read_text()
    return sorted({line.rsplit("/", 1)[-1] for line in maps.splitlines() if str(package) in line})


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
    assert _loaded(package) == [loaded]
    # a tier library defines no Python module: the error vLLM ignores, except for _C
    assert bool(logger.warnings) == (loaded == "_C.abi3.so")


def test_a_wheel_for_a_better_cpu_is_refused_clearly(wheel_with: Callable[..., Path]) -> None:
    package = wheel_with("_C_AVX512")
    with pytest.raises(
        RuntimeError, match="no CPU kernels that this CPU can run: it can run _C_AVX2"
    ):
        _loader()(_cpu(avx512=False, bf16=False), Logger())
    assert _loaded(package) == []


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
    body = _new_side("setup.py")
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
