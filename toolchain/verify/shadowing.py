"""Find what would be imported as `vllm` instead of the installed package.

Python puts the script's folder (or the working folder, for `python -c` and `-m`) first on
sys.path, so a vLLM source checkout there wins: `cannot import name 'LLM' from 'vllm' (unknown
location)`. A regular package or a module (source, bytecode or extension) wins over the installed
vLLM; a folder without `__init__` (a namespace portion) loses to it, but a Python without vLLM
imports it and fails the same way, so it is a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.machinery import all_suffixes
from pathlib import Path

from toolchain.errors import UsageError

PACKAGE = "vllm"


@dataclass(frozen=True, kw_only=True)
class Shadow:
    path: Path
    kind: str  # "a package", "a module", "an extension module", "a folder (namespace package)"

    @property
    def wins(self) -> bool:
        """Whether Python imports it instead of the installed vLLM."""
        return not self.kind.startswith("a folder")

    def __str__(self) -> str:
        return f"{self.path} is {self.kind} named vllm"


def shadows_in(folder: Path) -> list[Shadow]:
    """What in `folder` Python would find for `import vllm`."""
    found = []
    package = folder / PACKAGE
    if package.is_dir():
        regular = any((package / f"__init__{suffix}").is_file() for suffix in all_suffixes())
        kind = "a package" if regular else "a folder (namespace package)"
        found.append(Shadow(path=package, kind=kind))
    for suffix in all_suffixes():  # .py, .pyc, .cpython-311-x86_64-linux-gnu.so, .abi3.so, .so
        module = folder / f"{PACKAGE}{suffix}"
        if module.is_file():
            kind = "an extension module" if suffix.endswith(".so") else "a module"
            found.append(Shadow(path=module, kind=kind))
    return found


def project_folder(folder: Path) -> Path:
    """`folder` resolved, or a usage error when it is not a folder one could run Python from."""
    try:
        resolved = folder.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # missing, or a symlink loop
        raise UsageError(f"{folder}: not a folder ({exc})") from exc
    if not resolved.is_dir():
        raise UsageError(f"{folder}: a file, not the folder you run Python from")
    return resolved


def check_shadowing(folder: Path, pythonpath: str | None = None) -> list[Shadow]:
    """What a user who runs Python from `folder` (and with this PYTHONPATH) would import."""
    folders = [project_folder(folder)]
    env_path = os.environ.get("PYTHONPATH", "") if pythonpath is None else pythonpath
    folders += [Path(entry).resolve() for entry in env_path.split(os.pathsep) if entry]
    shadows: list[Shadow] = []
    for candidate in dict.fromkeys(folders):
        shadows += shadows_in(candidate)
    return shadows
