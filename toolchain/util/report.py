"""The one reporter: every line the toolkit prints for a person goes through it.

Library code returns data or calls the reporter, never `print()`: step lines with their
duration, details, commands, warnings, live progress and the closing summary of an artifact.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from toolchain.util.urls import redact


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass
class Elapsed:
    seconds: float = 0.0


class Reporter:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout  # looked up late, so captured output sees it

    def line(self, text: str = "", *, end: str = "\n") -> None:
        self.stream.write(redact(text) + end)  # a URL's credentials never reach a screen
        self.stream.flush()

    def detail(self, text: str) -> None:
        self.line(f"  {text}")

    def warning(self, text: str) -> None:
        self.line(f"warning: {text}")

    def heading(self, text: str) -> None:
        """The start of a step: `==> name: what it does`."""
        self.line(f"==> {text}")

    def outcome(self, text: str) -> None:
        """How a step ended, under its heading."""
        self.line(f"    {text}")

    @contextmanager
    def step(self, name: str, summary: str) -> Iterator[Elapsed]:
        """`==> name: summary`, then `    name done in T` when the block succeeds."""
        self.heading(f"{name}: {summary}")
        elapsed, started = Elapsed(), time.monotonic()
        yield elapsed
        elapsed.seconds = round(time.monotonic() - started, 1)
        self.outcome(f"{name} done in {duration(elapsed.seconds)}")

    def artifact(self, path: Path, *, sha256: str, size_mib: float, lines: list[str]) -> None:
        """The closing summary of something built: name, size, sha256 and more lines."""
        self.line(
            f"\n{path.name}\n  size    {size_mib:.1f} MiB\n  sha256  {sha256}\n"
            + "\n".join(f"  {line}" for line in lines)
        )


reporter = Reporter()
