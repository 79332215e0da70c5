"""The few files of a vLLM sdist the generator reads, and the test fixtures made of them."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import DataFileError, SourceError

# Where each fact comes from; BUILD_REQUIREMENTS moved to requirements/build/ in vLLM 0.20.
PKG_INFO = "PKG-INFO"
PYPROJECT = "pyproject.toml"
CPU_REQUIREMENTS = "requirements/cpu.txt"
BUILD_REQUIREMENTS = ("requirements/build/cpu.txt", "requirements/cpu-build.txt")
CMAKELISTS = "CMakeLists.txt"
CPU_EXTENSION = "cmake/cpu_extension.cmake"
APPLE_DOCS = "docs/getting_started/installation/cpu.apple.inc.md"  # the macOS floors
FACT_FILES = (
    PKG_INFO,
    PYPROJECT,
    CPU_REQUIREMENTS,
    *BUILD_REQUIREMENTS,
    CMAKELISTS,
    CPU_EXTENSION,
    APPLE_DOCS,
)


@dataclass(frozen=True, kw_only=True)
class SdistFiles:
    """The files read from one sdist, by their path inside it (without the `vllm-X/` prefix)."""

    name: str  # vllm-0.32.0.tar.gz
    files: Mapping[str, str]

    def text(self, path: str) -> str:
        if path not in self.files:
            raise DataFileError(f"{self.name} has no {path}: a layout this generator does not know")
        return self.files[path]

    def first(self, paths: Iterable[str]) -> tuple[str, str]:
        """(path, text) of the first of `paths` the sdist has."""
        for path in paths:
            if path in self.files:
                return path, self.files[path]
        raise DataFileError(f"{self.name} has none of {', '.join(paths)}")


def patch_targets(patch: Path) -> set[str]:
    """The files a -p1 patch changes (its `+++ b/PATH` lines)."""
    found = re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(errors="replace"), flags=re.MULTILINE)
    return set(found)


def read_sdist(source: Path, wanted: Iterable[str]) -> SdistFiles:
    """`wanted` files of an sdist (a .tar.gz with one top folder)."""
    paths = set(wanted)
    try:
        with tarfile.open(source, "r:*") as tar:
            return SdistFiles(name=source.name, files=_members(tar, paths))
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise SourceError(f"{source} is not a readable sdist ({exc})") from exc


def _members(tar: tarfile.TarFile, paths: set[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for member in tar:
        inner = member.name.partition("/")[2]
        if member.isfile() and inner in paths:
            handle = tar.extractfile(member)
            if handle is not None:
                files[inner] = handle.read().decode(errors="replace")
    return files


def write_fixture(files: SdistFiles, top: str, destination: Path) -> None:
    """A small .tar.gz of only these files under `top/`: what tests read instead of the sdist."""
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(files.files):
            data = files.files[path].encode()
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
