"""Which oneDNN units a finished build never links: the list a recipe carries to skip them.

vLLM links oneDNN as a static library, so the linker takes from `libdnnl.a` only the members that
resolve a reference. oneDNN compiles every source of its CPU folders whatever primitives and ISA
are enabled (`ONEDNN_ENABLE_PRIMITIVE_CPU_ISA` only takes implementations out of its dispatch
lists), so a lean build compiles many units its library never uses. Relinking the finished kernel
library with a link map names the members taken; the others are left out of the next build by
`toolchain/data/prune-onednn.cmake`, and the library links from the same members as before.

    python -m toolchain.compile.onednn_prune BUILD_TEMP LIBRARY [ARCHIVE]

BUILD_TEMP is the build folder that holds `build.ninja` (`src/build/temp.*` of a build-wheel work
folder), LIBRARY the ninja output to relink (`_C_AVX2.abi3.so`), ARCHIVE the static library
(default `libdnnl.a`). It prints the list: one `TARGET SOURCE` line per unit never linked, SOURCE
relative to the target's source folder.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

OBJECT = re.compile(r"/CMakeFiles/(?P<target>[^/]+)\.dir/(?P<source>.+)\.o$")


def members_taken(link_map: str, archive: str) -> set[str]:
    """Archive members the linker took, from the map's "Archive member included" section."""
    taken = link_map.split("\nDiscarded input sections", 1)[0]
    return set(re.findall(rf"{re.escape(archive)}\(([^)]+)\)", taken))


def unused_units(objects: Iterable[str], taken: set[str]) -> list[str]:
    """`TARGET SOURCE` for each object whose member name the link never took.

    An archive names members by file name only; a name taken once keeps every object of that
    name, so two sources called `utils.cpp` are both kept when either is used."""
    lines = []
    for path in objects:
        match = OBJECT.search(path)
        if match and Path(path).name not in taken:
            lines.append(f"{match['target']} {match['source']}")
    return sorted(lines)


def _ninja(build_temp: Path, *args: str) -> str:
    return subprocess.run(
        ["ninja", "-C", str(build_temp), *args], check=True, capture_output=True, text=True
    ).stdout


def measure(build_temp: Path, library: str, archive: str = "libdnnl.a") -> list[str]:
    """Relink `library` with a link map (into a temporary file) and list the units not taken."""
    link = shlex.split(_ninja(build_temp, "-t", "commands", library).splitlines()[-1])
    archive_path = next(arg for arg in link if Path(arg).name == archive)
    objects = [
        line.strip()
        for line in _ninja(build_temp, "-t", "query", archive_path).splitlines()
        if line.strip().endswith(".o")
    ]
    with tempfile.TemporaryDirectory() as scratch:
        out, link_map = Path(scratch) / "relinked.so", Path(scratch) / "link.map"
        start = link.index("&&") + 1 if "&&" in link else 0
        command = link[start:]
        end = command.index("&&") if "&&" in command else len(command)
        command = command[:end]
        command[command.index("-o") + 1] = str(out)
        subprocess.run([*command, f"-Wl,-Map={link_map}"], check=True, cwd=build_temp)
        taken = members_taken(link_map.read_text(errors="replace"), archive)
    return unused_units(objects, taken)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__ or "")
        return 64
    for line in measure(Path(argv[0]), *argv[1:]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
