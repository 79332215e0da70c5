"""Find what would be imported as `vllm` instead of the installed package.

Python puts the script's folder (or the working folder, for `python -c` and `-m`) first on
sys.path, so a vLLM source checkout there wins: `cannot import name 'LLM' from 'vllm' (unknown
location)`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = "vllm"


def shadows_in(folder: Path) -> list[str]:
    """What in `folder` Python would import as `vllm`, in words."""
    found = []
    package = folder / PACKAGE
    if package.is_dir():
        kind = (
            "a package" if (package / "__init__.py").is_file() else "a folder (namespace package)"
        )
        found.append(f"{package} is {kind} named vllm")
    for name in (f"{PACKAGE}.py", f"{PACKAGE}.pyc"):
        if (folder / name).is_file():
            found.append(f"{folder / name} is a module named vllm")
    found += [
        f"{path} is an extension module named vllm" for path in folder.glob(f"{PACKAGE}.*.so")
    ]
    return found


def check_shadowing(folder: Path, pythonpath: str | None = None) -> list[str]:
    """Problems for a user who runs Python from `folder` (and with this PYTHONPATH)."""
    folders = [folder.resolve()]
    env_path = os.environ.get("PYTHONPATH", "") if pythonpath is None else pythonpath
    folders += [Path(entry).resolve() for entry in env_path.split(os.pathsep) if entry]
    problems: list[str] = []
    for candidate in dict.fromkeys(folders):
        problems += shadows_in(candidate)
    return problems
