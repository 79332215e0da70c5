"""Which oneDNN units a finished build never links: the list a recipe carries to skip them.

vLLM links oneDNN as a static library, so the linker takes from `libdnnl.a` only the members that
resolve a reference. oneDNN compiles every source of its CPU folders whatever primitives and ISA
are enabled (`ONEDNN_ENABLE_PRIMITIVE_CPU_ISA` only takes implementations out of its dispatch
lists), so a lean build compiles many units its libraries never use. Relinking each finished
kernel library with a link map names the members it takes; a unit no library takes is left out
of the next build by `toolchain/data/prune-onednn.cmake`, and every library links from the same
members as before. `python -m toolchain learn-prune` runs this on a build-wheel build folder.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.compile.ninja_file import NinjaBuild, read_build_file
from toolchain.errors import BuildError
from toolchain.util.files import atomic_path
from toolchain.util.report import reporter
from toolchain.util.run import capture

OBJECT = re.compile(r"/CMakeFiles/(?P<target>[^/]+)\.dir/(?P<source>.+)\.o$")
ARCHIVE = "libdnnl.a"
UNIT_LINE = "One line per unit: the CMake target, the source relative to that target's folder."
LINK_SECONDS = 1800.0  # one relink of a kernel library; seconds on this project's machines


@dataclass(frozen=True, kw_only=True)
class Learned:
    """What relinking a build's kernel libraries found."""

    libraries: tuple[str, ...]  # the ninja outputs relinked (`_C.abi3.so`, `_C_AVX2.abi3.so`)
    units: int  # oneDNN's units in that build, those its own list left out included
    left_out: tuple[str, ...]  # `TARGET SOURCE`, sorted: no library takes them
    listed_before: int  # units the build had already left out by its recipe's list

    @property
    def kept(self) -> int:
        return self.units - len(self.left_out)


def members_taken(link_map: str, archive: str) -> set[str]:
    """Archive members the linker took, from the map's "Archive member included" section."""
    taken = link_map.split("\nDiscarded input sections", 1)[0]
    return set(re.findall(rf"{re.escape(archive)}\(([^)]+)\)", taken))


def unit_names(builds: Sequence[NinjaBuild], objects: Iterable[str]) -> dict[str, str | None]:
    """Each object's `TARGET SOURCE`, SOURCE relative to the target's folder as
    prune-onednn.cmake computes it; None when that cannot be known (such a unit is kept).

    CMake names the object of a source outside the target's folder by its absolute path
    (`dnnl_common.dir/work/.../third_party/ittnotify/jitprofiling.c.o`); its compile statement
    gives the absolute source, and another object of the target gives the target's folder."""
    wanted = set(objects)
    sources = {b.outputs[0]: b.inputs[0] for b in builds if b.inputs and b.outputs[0] in wanted}
    folders: dict[str, str] = {}
    named: dict[str, tuple[str, str, str]] = {}
    for path in wanted:
        match, source = OBJECT.search(path), sources.get(path, "")
        if match:
            named[path] = (match["target"], match["source"], source)
            if source.endswith("/" + match["source"]) and source != "/" + match["source"]:
                folders[match["target"]] = source[: -len(match["source"]) - 1]
    names: dict[str, str | None] = {}
    for path, (target, relative, source) in named.items():
        if source == "/" + relative:  # named by its absolute path
            folder = folders.get(target)
            relative = os.path.relpath(source, folder) if folder else ""
        names[path] = f"{target} {relative}" if relative else None
    return names


def unused_units(names: dict[str, str | None], taken: set[str]) -> list[str]:
    """`TARGET SOURCE` for each object whose member name no link took.

    An archive names members by file name only; a name taken once keeps every object of that
    name, so two sources called `utils.cpp` are both kept when either is used."""
    units = (unit for path, unit in names.items() if Path(path).name not in taken)
    return sorted(unit for unit in units if unit)


def archive_build(builds: Sequence[NinjaBuild], archive: str = ARCHIVE) -> NinjaBuild:
    """The statement that makes the static library (CMake also names it by a phony alias)."""
    for build in builds:
        if build.rule != "phony" and any(Path(out).name == archive for out in build.outputs):
            return build
    raise BuildError(
        f"build.ninja makes no {archive}: this build does not link oneDNN statically",
        hint="learn-prune reads a build-wheel build of vLLM's CPU backend",
    )


def kernel_libraries(builds: Sequence[NinjaBuild], archive_path: str) -> tuple[str, ...]:
    """The shared libraries whose link takes the archive: vLLM's kernel libraries."""
    return tuple(
        sorted(
            out
            for build in builds
            if build.rule != "phony" and build.needs(archive_path)
            for out in build.outputs
            if ".so" in Path(out).name
        )
    )


def link_command(commands: str, library: str) -> list[str]:
    """The link of `library` from `ninja -t commands LIBRARY`: its last line, without the
    `: &&` and `&& :` (pre- and post-link steps) around the compiler's command."""
    lines = commands.strip().splitlines()
    words = shlex.split(lines[-1]) if lines else []
    parts: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    for part in parts:
        if "-o" in part[:-1] and part[part.index("-o") + 1] == library:
            return part
    raise BuildError(f"ninja's last command for {library} is not its link: {lines[-1:]}")


def relink_with_map(build_temp: Path, library: str, *, ninja: str = "ninja") -> str:
    """Link `library` again (into a scratch folder) with a link map, and return the map."""
    commands = capture([ninja, "-C", build_temp, "-t", "commands", library]).stdout
    command = link_command(commands, library)
    with tempfile.TemporaryDirectory(prefix="vcb-relink-") as scratch:
        out, link_map = Path(scratch) / Path(library).name, Path(scratch) / "link.map"
        command[command.index("-o") + 1] = str(out)
        capture([*command, f"-Wl,-Map={link_map}"], cwd=build_temp, timeout=LINK_SECONDS)
        return link_map.read_text(errors="replace")


def cmake_cache_entry(folder: Path, name: str) -> str | None:
    """The value of `name` in the folder's CMakeCache.txt; None when the folder has no cache or
    the cache no such entry (OSError when it cannot be read)."""
    cache = folder / "CMakeCache.txt"
    if not cache.is_file():
        return None
    text = cache.read_text(errors="replace")
    found = re.search(rf"^{re.escape(name)}:[A-Z]+=(.*)$", text, re.MULTILINE)
    return found[1].strip() if found else None


def listed_before(build_temp: Path) -> list[str]:
    """The units the build left out by its own list (VCB_ONEDNN_SKIP in its CMake cache): they
    were never compiled, and the libraries linked without them."""
    named = cmake_cache_entry(build_temp, "VCB_ONEDNN_SKIP")
    if not named:
        return []
    listing = Path(named)
    if not listing.is_file():
        raise BuildError(
            f"{build_temp / 'CMakeCache.txt'} names the prune list {listing}, which is gone: the "
            "units that build left out cannot be known",
            hint="build the target again (build-wheel), then learn from that build",
        )
    lines = listing.read_text(errors="replace").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def learn(
    build_temp: Path,
    libraries: Sequence[str] = (),
    *,
    archive: str = ARCHIVE,
    ninja: str = "ninja",
) -> Learned:
    """Relink each kernel library (every one that links `archive` when none are named) and
    list the archive's units that none of them takes."""
    builds = read_build_file(build_temp / "build.ninja")
    made = archive_build(builds, archive)
    libraries = tuple(libraries) or kernel_libraries(builds, made.outputs[0])
    if not libraries:
        raise BuildError(f"no shared library in {build_temp}/build.ninja links {archive}")
    taken: set[str] = set()
    for library in libraries:
        if not (build_temp / library).is_file():
            raise BuildError(
                f"{build_temp / library} is missing: the build did not finish",
                hint="finish the build (build-wheel), then learn from it",
            )
        reporter.line(f"relinking {library} with a link map")
        members = members_taken(relink_with_map(build_temp, library, ninja=ninja), archive)
        if not members:
            raise BuildError(f"{library} takes nothing from {archive}: it is no kernel library")
        taken |= members
    names = unit_names(builds, [path for path in made.inputs if path.endswith(".o")])
    before = listed_before(build_temp)

    return Learned(
        libraries=libraries,
        units=len(names) + len(before),
        left_out=tuple(sorted(set(unused_units(names, taken)) | set(before))),
        listed_before=len(before),
    )


def render_list(learned: Learned, *, build: str, command: str, day: str) -> str:
    """The list file: a header saying what build, which libraries, the counts and the command,
    then one `TARGET SOURCE` line per unit left out."""
    said = [
        f"oneDNN units that {build} never takes from {ARCHIVE}: {len(learned.left_out)} of "
        f"{learned.units} units left out, {learned.kept} kept.",
        f"Kernel libraries relinked with a link map: {', '.join(learned.libraries)}; a unit is "
        "left out only when none of them takes it.",
    ]
    if learned.listed_before:
        said.append(
            f"That build already left out {learned.listed_before} units by its recipe's list; "
            "they stay left out."
        )
    said.append(f"Learned on {day} with")
    header = [line for text in said for line in textwrap.wrap(text, 96)]
    header += [f"  {command}", UNIT_LINE]
    return "".join(f"# {line}\n" for line in header) + "".join(f"{u}\n" for u in learned.left_out)


def write_list(path: Path, text: str) -> None:
    """Written to a temporary name beside `path`, then renamed: never half a list."""
    with atomic_path(path) as temporary:
        temporary.write_text(text)
