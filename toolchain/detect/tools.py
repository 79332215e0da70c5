"""Build tools on PATH with their versions: every gcc/g++ (g++-N too), cmake, ninja, caches."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import ToolchainError
from toolchain.util import run
from toolchain.util.files import sha256_file

COMPILER_NAME = re.compile(r"^(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-\d+(\.\d+)*)?$")
BUILD_TOOLS = ("cmake", "ninja", "ccache", "sccache", "patchelf")
OWN_TOOLS = ("patchelf",)  # the build runs these as util/run.own_program finds them
VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
NUMA_HEADER_DIRS = (Path("/usr/include"), Path("/usr/local/include"))


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    path: str
    version: str | None
    # compilers: the sha256 of the program itself (symlinks followed). A shared compile cache
    # (sccache) hits only across machines whose compiler has the same bytes.
    sha256: str | None = None


def path_dirs() -> list[Path]:
    return [Path(entry) for entry in os.environ.get("PATH", "").split(os.pathsep) if entry]


def _executables(folder: Path) -> list[Path]:
    try:
        return sorted(entry for entry in folder.iterdir() if os.access(entry, os.X_OK))
    except OSError:
        return []


def executables_on_path(name: re.Pattern[str]) -> dict[str, Path]:
    """Every executable whose name matches, the first on PATH winning as the shell would."""
    seen: dict[str, Path] = {}
    for folder in path_dirs():
        for entry in _executables(folder):
            if name.match(entry.name):
                seen.setdefault(entry.name, entry)
    return seen


def tool_version(path: Path | str) -> str | None:
    """The version a tool reports; gcc's -dumpfullversion gives all three numbers."""
    name = Path(path).name
    gnu = name.startswith(("gcc", "g++")) or name in {"cc", "c++"}
    args = ["-dumpfullversion"] if gnu else ["--version"]
    try:
        output = run.capture([str(path), *args], timeout=20)
    except ToolchainError:
        return None
    match = VERSION.search(output.stdout or output.stderr)
    return match.group(1) if match else None


def find_tools() -> list[Tool]:
    found = [
        Tool(name=name, path=str(path), version=tool_version(path), sha256=program_sha256(path))
        for name, path in sorted(executables_on_path(COMPILER_NAME).items())
    ]
    for name in BUILD_TOOLS:
        # the one the build runs: patchelf from the toolkit's own scripts folder before PATH's
        path = shutil.which(name, path=run.own_scripts_first() if name in OWN_TOOLS else None)
        if path is not None:
            found.append(Tool(name=name, path=path, version=tool_version(path)))
    return found


def program_sha256(program: Path | str) -> str | None:
    """The sha256 of a program's bytes (found on PATH, symlinks followed): what a shared compile
    cache keys a compiler on. None when it is not there."""
    found = shutil.which(str(program))
    try:
        return sha256_file(Path(found).resolve()) if found else None
    except OSError:
        return None


def numa_header() -> str | None:
    """Where numa.h (Debian's libnuma-dev) is, or None."""
    extra = [
        Path(entry)
        for var in ("CPATH", "C_INCLUDE_PATH")
        for entry in os.environ.get(var, "").split(os.pathsep)
        if entry
    ]
    for folder in [*extra, *NUMA_HEADER_DIRS]:
        if (folder / "numa.h").is_file():
            return str(folder / "numa.h")
    return None
