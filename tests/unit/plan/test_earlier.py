"""Earlier builds like this one (toolchain/plan/earlier.py)."""

from __future__ import annotations

import json
from pathlib import Path

from toolchain.plan.earlier import EarlierBuild, earlier_builds

WHEEL = "0.32.0+cpu.portable"


def _write(folder: Path, name: str, record: object, version: str = WHEEL) -> str:
    path = folder / f"vllm-{version}-{name}.whl.manifest.json"
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return path.name


def test_only_builds_of_the_same_wheel_arch_build_type_level_and_headers_are_like_this_one(
    tmp_path: Path,
) -> None:
    env_named = _write(tmp_path, "a", {"env": {"CMAKE_BUILD_TYPE": "Release"}})
    key_named = _write(tmp_path, "b", {"build_type": "Release", "target_arch": "x86_64"})
    with_headers = _write(tmp_path, "c", {"build_type": "Release", "precompiled_headers": ["_C"]})
    debug_info = _write(tmp_path, "d", {"build_type": "RelWithDebInfo"})
    arm = _write(tmp_path, "e", {"build_type": "Release", "target_arch": "aarch64"})
    _write(tmp_path, "f", {"build_type": "Release"}, version="0.32.0+cpu.avx2")
    _write(tmp_path, "g", {})  # names no build type
    _write(tmp_path, "h", "{not json")
    _write(tmp_path, "i", ["a", "list"])  # JSON, but no manifest
    lean = _write(tmp_path, "j", {"build_type": "Release", "torch_headers": "lean"})
    at_o2 = _write(tmp_path, "k", {"build_type": "Release", "opt_level": "O2"})

    def like(
        arch: str = "x86_64",
        build_type: str = "Release",
        level: str = "O3",
        pch: bool = False,
        torch: str = "full",
    ) -> list[str]:
        found = earlier_builds(
            tmp_path,
            WHEEL,
            arch=arch,
            build_type=build_type,
            opt_level=level,
            precompiled=pch,
            torch_headers=torch,
        )
        return [b.manifest for b in found]

    # a manifest that names no torch headers was a build with torch's own, one that names no
    # level was at its build type's own
    assert like() == [env_named, key_named]
    assert like(level="O2") == [at_o2]
    assert like(torch="lean") == [lean]
    assert like(pch=True) == [with_headers]
    assert like(build_type="RelWithDebInfo", level="O2") == [debug_info]
    assert like(build_type="RelWithDebInfo") == []
    assert like(arch="aarch64") == [env_named, arm]  # a manifest that names no arch: any
    nowhere = tmp_path / "none"
    assert (
        earlier_builds(
            nowhere,
            WHEEL,
            arch="x86_64",
            build_type="Release",
            opt_level="O2",
            precompiled=False,
            torch_headers="lean",
        )
        == []
    )


def test_a_figure_is_a_finite_number_or_none() -> None:
    compiled = {"cpu_seconds": 12.5, "steps": 100, "seconds": "12.5", "memory": None}
    compiled |= {"pauses": True, "nan": float("nan"), "inf": float("inf"), "huge": 10**400}
    build = EarlierBuild("m", {"compile": compiled, "created": None})
    assert build.figure("compile", "cpu_seconds") == 12.5
    assert build.figure("compile", "steps") == 100.0
    for odd in ("seconds", "memory", "pauses", "nan", "inf", "huge", "missing"):
        assert build.figure("compile", odd) is None, odd
    assert build.figure("compile", "cpu_seconds", "deeper") is None
    assert build.created == ""
