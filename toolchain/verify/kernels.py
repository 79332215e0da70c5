"""Load each kernel library of an installed vLLM in its own process: SIGILL is a finding.

`import vllm` loads no kernels, so it proves nothing about the CPU. The kernel libraries are torch
op libraries (loaded with torch.ops.load_library), not Python modules.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import KernelCheckError
from toolchain.targets import tier_needs
from toolchain.util import run

LOAD = "import sys, torch; torch.ops.load_library(sys.argv[1])"
FIND_PACKAGE = (
    "import importlib.util as u; s = u.find_spec('vllm'); "
    "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
)
SIGILL_CODES = (-signal.SIGILL, 128 + signal.SIGILL)


@dataclass(frozen=True, kw_only=True)
class KernelLoad:
    library: str
    tier: str
    status: str  # "ok", "sigill" or "error"
    lacking: tuple[str, ...] = ()
    detail: str = ""


def tier_of(library: Path) -> str:
    return library.name.split(".", 1)[0]


def kernel_libraries(package_dir: Path, root: Path = Path("/")) -> list[Path]:
    """The kernel libraries in `package_dir` as seen inside `root` (an emulated root), found
    from here."""
    here = root / package_dir.relative_to("/") if package_dir.is_absolute() else package_dir
    return sorted(package_dir / p.name for p in here.glob("_*C*.so") if p.is_file())


def load_kernels(
    python: Path,
    package_dir: Path,
    *,
    arch: str,
    isa: Mapping[str, bool],
    wheel_min_isa: tuple[str, ...] = (),
    cwd: Path | None = None,
    root: Path = Path("/"),
) -> list[KernelLoad]:
    results = []
    for library in kernel_libraries(package_dir, root):
        tier = tier_of(library)
        needs = tier_needs(arch).get(tier, wheel_min_isa)
        lacking = tuple(feature for feature in needs if not isa.get(feature))
        output = run.capture([python, "-c", LOAD, library], timeout=300, check=False, cwd=cwd)
        if output.returncode == 0:
            results.append(KernelLoad(library=library.name, tier=tier, status="ok"))
        elif output.returncode in SIGILL_CODES:
            results.append(
                KernelLoad(
                    library=library.name,
                    tier=tier,
                    status="sigill",
                    lacking=lacking or ("an instruction it was compiled for",),
                )
            )
        else:
            last = (output.stderr or output.stdout).strip().splitlines()[-1:] or ["no output"]
            results.append(
                KernelLoad(
                    library=library.name,
                    tier=tier,
                    status="error",
                    detail=f"exit {output.returncode}: {last[0]}",
                )
            )
    return results


def find_package(python: Path, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    """Where `python`, run in `cwd`, imports vllm from ('' if nowhere), without importing it."""
    output = run.capture([python, "-c", FIND_PACKAGE], timeout=60, cwd=cwd, env=env, check=False)
    lines = output.stdout.strip().splitlines() if output.returncode == 0 else []
    return lines[-1] if lines else ""


def package_dir(python: Path, cwd: Path) -> Path:
    """Where `python` imports vllm from; KernelCheckError when it finds none."""
    found = find_package(python, cwd)
    if not found:
        raise KernelCheckError(
            f"{python} cannot find a vllm package",
            hint="install the wheel into that environment first",
        )
    return Path(found)


def describe(result: KernelLoad) -> str:
    if result.status == "ok":
        return f"{result.library}: loads"
    if result.status == "sigill":
        return (
            f"{result.library}: killed by SIGILL: this CPU lacks {', '.join(result.lacking)} "
            "(an unavailable tier if another one loads; vLLM picks the tier the CPU runs)"
        )
    return f"{result.library}: fails to load ({result.detail})"
