"""The same preprocessed unit on every machine: g++'s `#pragma once` twins and file times."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.compile.steps import same_mtime

TWIN = "#pragma once\nint twin_declared_here;\n"


def _preprocessed(include: Path) -> str:
    source = include.parent / "unit.cpp"
    source.write_text('#include "a/stub.h"\n#include "b/stub.h"\n')
    return subprocess.run(
        ["g++", "-E", "-P", "-I", str(include), str(source)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.mark.compile
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_one_time_for_all_headers_makes_twins_preprocess_alike(tmp_path: Path) -> None:
    include = tmp_path / "include"
    for folder, stamp in (("a", 1_000_000_000), ("b", 1_000_000_007)):  # installed seconds apart
        (include / folder).mkdir(parents=True)
        (include / folder / "stub.h").write_text(TWIN)
        os.utime(include / folder / "stub.h", (stamp, stamp))
    assert _preprocessed(include).count("twin_declared_here") == 2, "different times: both read"
    same_mtime(include)
    times = {path.stat().st_mtime_ns for path in include.rglob("*.h")}
    assert times == {1_000_000_007 * 10**9}, "every file gets the newest time"
    assert _preprocessed(include).count("twin_declared_here") == 1, "same time: g++ reads one"
