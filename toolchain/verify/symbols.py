"""Symbols a kernel library needs that nothing it is loaded with defines, read with readelf (any
architecture's ELF), so every missing name is reported at once, not just the first that dlopen
meets. vLLM's Arm library calls `sbgemm_` from the OpenBLAS inside PyTorch's CPU build; PyPI's
aarch64 torch (a CUDA build, with NVPL BLAS) has none.

Names are compared without their version nodes: a library whose symbol exists at another version
still fails at load time, which the `isa` check then reports from the load itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toolchain.util import run
from toolchain.verify.results import FAIL, PASS, WARN, CheckResult

READELF = "readelf"


@dataclass(frozen=True, kw_only=True)
class ElfSymbols:
    defined: frozenset[str]
    undefined: dict[str, str]  # name -> FUNC / OBJECT / NOTYPE, strong references only
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class MissingSymbols:
    library: str
    symbols: dict[str, str]  # name -> type
    unfound_libraries: tuple[str, ...]

    def describe(self) -> str:
        names = sorted(self.symbols)
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        parts = (
            [f"{self.library} needs {shown}, which nothing it loads with defines"] if names else []
        )
        if self.unfound_libraries:
            parts.append(f"{self.library} needs {', '.join(self.unfound_libraries)}, not found")
        return "; ".join(parts)


def parse_dyn_syms(text: str) -> tuple[frozenset[str], dict[str, str]]:
    """`readelf --dyn-syms -W` output: the defined names, and the strong undefined ones."""
    defined, undefined = set(), {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].endswith(":") or not fields[0][:-1].isdigit():
            continue
        kind, bind, ndx, name = fields[3], fields[4], fields[6], fields[7].split("@")[0]
        if not name:
            continue
        if ndx == "UND":
            if bind != "WEAK":
                undefined[name] = kind
        else:
            defined.add(name)
    return frozenset(defined), undefined


def parse_dynamic(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`readelf -d` output: DT_NEEDED names and the RUNPATH/RPATH folders."""
    needed, runpath = [], []
    for line in text.splitlines():
        if "(NEEDED)" in line and "[" in line:
            needed.append(line.split("[", 1)[1].rstrip("]"))
        elif ("(RUNPATH)" in line or "(RPATH)" in line) and "[" in line:
            runpath += line.split("[", 1)[1].rstrip("]").split(":")
    return tuple(needed), tuple(runpath)


def read_elf(library: Path) -> ElfSymbols:
    syms = run.capture([READELF, "--dyn-syms", "-W", library], timeout=300).stdout
    dynamic = run.capture([READELF, "-d", "-W", library], timeout=60).stdout
    defined, undefined = parse_dyn_syms(syms)
    needed, runpath = parse_dynamic(dynamic)
    return ElfSymbols(defined=defined, undefined=undefined, needed=needed, runpath=runpath)


def system_dirs(root: Path, arch: str) -> tuple[Path, ...]:
    names = (f"lib/{arch}-linux-gnu", f"usr/lib/{arch}-linux-gnu", "lib64", "usr/lib64", "lib")
    return tuple(root / name for name in names)


def missing_symbols(
    library: Path, search: Iterable[Path], *, interpreter: Path, root: Path = Path("/")
) -> MissingSymbols:
    """What `library` needs that neither the Python interpreter loading it (the global scope)
    nor its DT_NEEDED closure defines. `search`: folders where already-loaded libraries live
    (torch/lib: torch is loaded before the kernels), then the system's; `root` maps RUNPATHs of
    absolute folders into an emulated root."""
    top = read_elf(library)
    folders = list(search)
    python = read_elf(interpreter)
    seen: dict[str, ElfSymbols] = {interpreter.name: python}
    unfound: list[str] = []
    # a Python built with --enable-shared (pyenv's, for one) defines the C API in its
    # libpython, which it loads first: that is global scope too
    queue = [(name, interpreter.parent, python.runpath) for name in python.needed]
    queue += [(name, library.parent, top.runpath) for name in top.needed]
    while queue:
        name, origin, runpath = queue.pop(0)
        if name in seen or name in unfound:
            continue
        found = _locate(name, origin, runpath, folders, root)
        if found is None:
            unfound.append(name)
            continue
        elf = seen[name] = read_elf(found)
        queue += [(n, found.parent, elf.runpath) for n in elf.needed if n not in seen]
    defined = set().union(*(elf.defined for elf in seen.values()))
    missing = {name: kind for name, kind in top.undefined.items() if name not in defined}
    return MissingSymbols(library=library.name, symbols=missing, unfound_libraries=tuple(unfound))


def _locate(
    name: str, origin: Path, runpath: Iterable[str], folders: list[Path], root: Path
) -> Path | None:
    candidates = [
        Path(entry.replace("$ORIGIN", str(origin)))
        if "$ORIGIN" in entry
        else root / entry.lstrip("/")
        for entry in runpath
    ]
    for folder in [*candidates, *folders]:
        path = folder / name
        if path.is_file():
            return path.resolve()
    return None


def kernel_symbols(
    site: Path, *, interpreter: Path, arch: str, root: Path = Path("/")
) -> list[MissingSymbols] | None:
    """What each kernel library of the vllm in `site` lacks (only those lacking something);
    None when readelf is not installed."""
    if shutil.which(READELF) is None:
        return None
    search = [site / "torch" / "lib", *system_dirs(root, arch)]
    found = [
        missing_symbols(library, search, interpreter=interpreter, root=root)
        for library in sorted((site / "vllm").glob("_*C*.so"))
    ]
    return [m for m in found if m.symbols or m.unfound_libraries]


def check_symbols(missing: list[MissingSymbols], *, stand_ins: str = "") -> CheckResult:
    """Every symbol the kernel libraries need is defined by what they load with; `stand_ins`:
    the library of aborting stand-ins preloaded for them (a substitute torch lacks them)."""
    details = {m.library: sorted(m.symbols) + list(m.unfound_libraries) for m in missing}
    if not missing:
        return CheckResult(
            name="symbols",
            status=PASS,
            summary="every symbol the kernel libraries need is defined by what they load with",
        )
    found = "; ".join(m.describe() for m in missing)
    if stand_ins:
        return CheckResult(
            name="symbols",
            status=WARN,
            details=details,
            summary=f"{found}: the substitute torch lacks them (PyTorch's CPU build has them); "
            f"loaded with stand-ins that abort if called ({stand_ins})",
            fix="give --find-links with the aarch64 torch +cpu wheel to verify without stand-ins",
        )
    return CheckResult(
        name="symbols",
        status=FAIL,
        details=details,
        summary=f"{found}: the library cannot load with this torch",
        fix="install the torch the wheel was built against (its build manifest names it)",
    )
