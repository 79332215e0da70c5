"""Debug info out of the wheel: each library's DWARF into a separate archive beside it.

A RelWithDebInfo build keeps symbols for those who debug a crash, but every node that installs
the wheel would otherwise download them. `objcopy --only-keep-debug` writes each library's debug
sections to `NAME.debug`, `--strip-debug --add-gnu-debuglink` leaves the library small and naming
that file (gdb finds it beside the library), and the `.debug` files go into one `.tar.gz`.
"""

from __future__ import annotations

import tarfile
import tempfile
import zipfile
from pathlib import Path

from toolchain.util import run
from toolchain.util.files import atomic_path
from toolchain.wheelfile import replace_files


def _is_library(name: str) -> bool:
    return name.endswith(".so") or ".so." in name.rsplit("/", 1)[-1]


def _has_debug_info(library: Path) -> bool:
    sections = run.capture(["readelf", "-S", "-W", library]).stdout
    return ".debug_info" in sections


def split_debug_info(wheel: Path, archive: Path, *, log: Path) -> list[str]:
    """Strip `wheel`'s libraries in place (atomically) and write their debug info to `archive`.

    Returns the libraries split; with none (no library had debug info), no archive is written.
    """
    with tempfile.TemporaryDirectory(prefix="vcb-debug-") as folder:
        root = Path(folder)
        stripped: dict[str, bytes] = {}
        with zipfile.ZipFile(wheel) as source:
            for name in filter(_is_library, source.namelist()):
                library = root / name
                library.parent.mkdir(parents=True, exist_ok=True)
                library.write_bytes(source.read(name))
                if not _has_debug_info(library):
                    library.unlink()
                    continue
                debug = library.with_name(f"{library.name}.debug")
                run.run_logged(
                    ["objcopy", "--only-keep-debug", "--compress-debug-sections=zlib", library,
                     debug],
                    log=log,
                )  # fmt: skip
                run.run_logged(
                    ["objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", library],
                    log=log,
                    cwd=library.parent,
                )
                stripped[name] = library.read_bytes()
        if not stripped:
            return []
        with atomic_path(archive) as temporary, tarfile.open(temporary, "w:gz") as tar:
            for name in sorted(stripped):
                tar.add(root / f"{name}.debug", arcname=f"{name}.debug")
        replace_files(wheel, stripped)
    return sorted(stripped)
