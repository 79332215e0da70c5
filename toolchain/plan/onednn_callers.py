"""A release's oneDNN callers: what decides which oneDNN units its kernel libraries link.

A prune list names the units of `libdnnl.a` that no kernel library takes. Which members the linker
takes follows from the oneDNN symbols vLLM's own sources reference and from how cmake configures
oneDNN; nothing else in vLLM changes it. So a list learned from one release holds for another
whose oneDNN is the same and whose callers are byte for byte the same: the sources under `csrc/`
that include oneDNN's headers or name its namespace, those that include such a source (their
calls reach oneDNN through its inline code), and the lines of `cmake/cpu_extension.cmake` that set
oneDNN up. `callers_digest` hashes exactly those; learn-prune records it beside a list
(`callers` in `[[onednn_prune]]`) and new-recipe hands a list on only to a release with the same.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from toolchain.errors import SourceError

SOURCES = "csrc/"
CPU_EXTENSION = "cmake/cpu_extension.cmake"
CALLS_ONEDNN = re.compile(r"oneapi/dnnl|dnnl::")  # its headers, or its C++ namespace
CONFIGURES_ONEDNN = re.compile(r"onednn|dnnl", re.IGNORECASE)  # a cmake line about oneDNN


def callers(files: Mapping[str, str]) -> list[str]:
    """The paths among `files` (path -> text, relative to the source tree's top) of vLLM's
    sources under csrc/ that reach oneDNN: they include its headers or name its namespace, or
    include (by file name) a source that does."""
    sources = {path: text for path, text in files.items() if path.startswith(SOURCES)}
    found = {path for path, text in sources.items() if CALLS_ONEDNN.search(text)}
    while True:
        names = "|".join(re.escape(Path(path).name) for path in sorted(found))
        including = re.compile(rf'#\s*include\s*[<"](?:[^">]*/)?(?:{names})[">]')
        more = {
            path for path, text in sources.items() if path not in found and including.search(text)
        }
        if not more:
            return sorted(found)
        found |= more


def onednn_lines(cmake: str) -> list[str]:
    """The lines of cpu_extension.cmake that configure oneDNN, stripped."""
    return [line.strip() for line in cmake.splitlines() if CONFIGURES_ONEDNN.search(line)]


def callers_digest(files: Mapping[str, str]) -> str:
    """`sha256:HEX` over the callers among `files` (path -> text, paths relative to the source
    tree's top) and cpu_extension.cmake's oneDNN lines; files of neither kind do not count."""
    digest = hashlib.sha256()
    for path in callers(files):
        digest.update(f"{path}\0{files[path]}\0".encode())
    digest.update("\n".join(onednn_lines(files.get(CPU_EXTENSION, ""))).encode())
    return f"sha256:{digest.hexdigest()}"


def sdist_callers(sdist: Path) -> dict[str, str]:
    """The files of an sdist (a .tar.gz with one top folder) that callers_digest reads: its
    oneDNN callers and cpu_extension.cmake."""
    files: dict[str, str] = {}
    try:
        with tarfile.open(sdist, "r:*") as tar:
            for member in tar:
                # `./vllm-X/...` (tar run on `.`) is the same file as `vllm-X/...`
                inner = member.name.removeprefix("./").partition("/")[2]
                wanted = inner == CPU_EXTENSION or inner.startswith(SOURCES)
                handle = tar.extractfile(member) if member.isfile() and wanted else None
                if handle is not None:
                    files[inner] = handle.read().decode(errors="replace")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise SourceError(f"{sdist} is not a readable sdist ({exc})") from exc
    kept = {*callers(files), CPU_EXTENSION}
    return {path: text for path, text in files.items() if path in kept}


def tree_callers(root: Path) -> dict[str, str]:
    """The same files of an unpacked source tree (a --source-dir build's)."""
    files = {
        path.relative_to(root).as_posix(): path.read_text(errors="replace")
        for path in sorted((root / SOURCES).rglob("*"))
        if path.is_file()
    }
    cmake = root / CPU_EXTENSION
    kept = {*callers(files)}
    found = {path: text for path, text in files.items() if path in kept}
    return found | ({CPU_EXTENSION: cmake.read_text(errors="replace")} if cmake.is_file() else {})


def without_patches(files: Mapping[str, str], patches: Iterable[bytes]) -> dict[str, str]:
    """`files` (path -> text) with each hunk of these -p1 patches taken back out where a file has
    it as the patch leaves it. A --source-dir tree with the recipe's patches applied by hand (as
    the plan asks; a cross build needs them) is then the sdist the recipe's lists were learned
    from, patched as build-wheel patches it."""
    result = dict(files)
    for patch in patches:
        for path, old, new in _hunks(patch.decode(errors="replace")):
            if path in result and new and new in result[path]:
                result[path] = result[path].replace(new, old, 1)
    return result


HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _hunks(diff: str) -> Iterator[tuple[str, str, str]]:
    """(path, old text, new text) of each hunk of a -p1 unified diff."""
    path, lines = "", diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip().partition("/")[2]
            continue
        header = HUNK.match(line)
        if header is None or not path:
            continue
        want_old = int(header.group(1) or "1")
        want_new = int(header.group(2) or "1")
        old: list[str] = []
        new: list[str] = []
        while i < len(lines) and (len(old) < want_old or len(new) < want_new):
            body, tag = lines[i][1:], lines[i][:1]
            i += 1
            if tag in (" ", ""):
                old.append(body)
                new.append(body)
            elif tag == "-":
                old.append(body)
            elif tag == "+":
                new.append(body)
        yield path, "".join(f"{x}\n" for x in old), "".join(f"{x}\n" for x in new)
