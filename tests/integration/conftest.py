"""What the integration tests share: the marks of a test that configures and builds a tiny CMake
project; for the recipe patches' Python hunks, the patched text of a file, a `vllm` package of
real tier libraries, which of them the process has loaded, and vLLM's logger."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# a tiny CMake project configured and built with the real tools
CMAKE_PROJECT_MARKS = [
    pytest.mark.compile,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("cmake", "ninja", "g++")),
        reason="needs cmake, ninja and g++",
    ),
]


def new_side(patch: Path, path: str) -> list[str]:
    """The patched text of `path`'s hunks in `patch` (context and added lines), in order."""
    lines, inside = [], False
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            inside = line == f"+++ b/{path}"
        elif inside and line[:1] in (" ", "+") and not line.startswith("+++"):
            lines.append(line[1:])
        elif inside and line == "":
            lines.append("")
    return lines


class Logger:
    """vLLM's logger as the loader hunks use it: the warnings they gave."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning_once(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


def tiers_loaded(package: Path) -> list[str]:
    """The files of `package` this process has mapped (the tier libraries it loaded)."""
    maps = Path("/proc/self/maps").read_text()
    return sorted({line.rsplit("/", 1)[-1] for line in maps.splitlines() if str(package) in line})


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
