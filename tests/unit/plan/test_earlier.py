"""Earlier builds like this one (toolchain/plan/earlier.py)."""

from __future__ import annotations

import json
from pathlib import Path

from toolchain.plan.earlier import earlier_builds

WHEEL = "0.32.0+cpu.avx2"


def _write(folder: Path, name: str, record: object, version: str = WHEEL) -> str:
    path = folder / f"vllm-{version}-{name}.whl.manifest.json"
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return path.name


def test_only_builds_of_the_same_wheel_build_type_and_header_setting_are_like_this_one(
    tmp_path: Path,
) -> None:
    env_named = _write(tmp_path, "a", {"env": {"CMAKE_BUILD_TYPE": "Release"}})
    key_named = _write(tmp_path, "b", {"build_type": "Release", "compile": {"cpu_seconds": "12"}})
    unnamed = _write(tmp_path, "c", {})  # an older manifest: upstream's default then
    with_headers = _write(tmp_path, "d", {"build_type": "Release", "precompiled_headers": ["_C"]})
    _write(tmp_path, "e", {"build_type": "Release"}, version="0.32.0+cpu.portable")
    _write(tmp_path, "f", "{not json")
    _write(tmp_path, "g", ["a", "list"])  # JSON, but no manifest

    def like(build_type: str, precompiled: bool = False) -> list[str]:
        found = earlier_builds(tmp_path, WHEEL, build_type=build_type, precompiled=precompiled)
        return [b.manifest for b in found]

    assert like("Release") == [env_named, key_named]
    assert like("RelWithDebInfo") == [unnamed]
    assert like("Release", precompiled=True) == [with_headers]
    assert earlier_builds(tmp_path / "none", WHEEL, build_type="Release", precompiled=False) == []


def test_a_figure_is_a_number_or_none(tmp_path: Path) -> None:
    compiled = {"cpu_seconds": "12.5", "steps": None}
    _write(tmp_path, "a", {"build_type": "Release", "compile": compiled, "build_tree_bytes": [1]})
    (build,) = earlier_builds(tmp_path, WHEEL, build_type="Release", precompiled=False)
    assert build.figure("compile", "cpu_seconds") == 12.5
    assert build.figure("compile", "steps") is None
    assert build.figure("compile", "seconds") is None
    assert build.figure("build_tree_bytes") is None
    assert build.figure("compile", "cpu_seconds", "deeper") is None
