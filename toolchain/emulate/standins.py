"""Stand-ins for functions a kernel library needs and the torch under test lacks (sbgemm_ with
PyPI's aarch64 torch): a library, preloaded in the emulated root, whose every function prints its
name and aborts. It lets the library load so the rest can be checked; it never computes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from toolchain.errors import ToolMissingError
from toolchain.util import run
from toolchain.util.files import atomic_path

C_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TRIPLETS = {"aarch64": "aarch64-linux-gnu"}
VERSIONED = re.compile(r"-gcc-(\d+)$")
HEADER = """\
#include <stdio.h>
#include <stdlib.h>

static void vcb_stand_in_called(const char *name) {
    fprintf(stderr, "vcb stand-in: %s was called; it is missing from this torch and exists here "
                    "only so the kernel library loads under verify: aborting\\n", name);
    abort();
}
"""


def stand_in_source(functions: Mapping[str, str]) -> str:
    """C for the FUNC symbols of `functions` (name -> readelf type); others cannot stand in."""
    names = sorted(name for name, kind in functions.items() if kind == "FUNC")
    bad = [name for name in names if not C_NAME.match(name)]
    if bad:
        raise ValueError(f"not C function names: {bad}")
    bodies = [f'void {name}(void) {{ vcb_stand_in_called("{name}"); }}\n' for name in names]
    return HEADER + "\n" + "".join(bodies)


def cross_compiler(arch: str, path: str | None = None) -> Path | None:
    """Debian's C cross compiler for `arch`: `<triplet>-gcc` (gcc-<triplet>), else the newest
    `<triplet>-gcc-N` (gcc-N-<triplet>, all a cross build's provision-toolchain installs)."""
    triplet = TRIPLETS.get(arch)
    if triplet is None:
        return None
    found: list[tuple[int, Path]] = []
    for folder in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        plain = Path(folder) / f"{triplet}-gcc"
        if os.access(plain, os.X_OK):
            return plain
        for candidate in Path(folder).glob(f"{triplet}-gcc-*"):
            match = VERSIONED.search(candidate.name)
            if match and os.access(candidate, os.X_OK):
                found.append((int(match.group(1)), candidate))
    return max(found)[1] if found else None


def build_stand_ins(functions: Mapping[str, str], arch: str, out: Path, log: Path) -> Path:
    compiler = cross_compiler(arch)
    if compiler is None:
        package = f"gcc-{TRIPLETS[arch]}" if arch in TRIPLETS else f"a C cross compiler for {arch}"
        raise ToolMissingError(
            f"no C cross compiler for {arch} was found on PATH: it compiles the stand-ins that "
            "let the kernel library load with a substitute torch",
            hint=f"apt-get install {package}",
        )
    source = out.with_suffix(".c")
    with atomic_path(source) as temporary:
        temporary.write_text(stand_in_source(functions))
    with atomic_path(out) as temporary:
        run.run_logged(
            [compiler, "-shared", "-fPIC", "-O1", "-o", temporary, source],
            log=log,
            what="compiling the stand-ins",
        )
    return out
