"""The one reporter: every line the toolkit prints for a person goes through it.

Library code returns data or calls the reporter, never `print()`: step lines with their
duration, details, commands, warnings, live progress and the closing summary of an artifact.
The command line sets how much reaches the screen (-q, -v) and a log file that gets it all.
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


# how much reaches the screen: -q shows QUIET lines only, -v VERBOSE ones too
QUIET, NORMAL, VERBOSE = 0, 1, 2
LOG_ONLY = 3  # never on the screen


class Reporter:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.level = NORMAL
        self.log_file: Path | None = None
        self.to_stderr = False

    def configure(
        self, *, level: int = NORMAL, log_file: Path | None = None, to_stderr: bool = False
    ) -> None:
        """`to_stderr`: stdout carries the command's one JSON object (--json), progress goes
        to stderr."""
        self.level, self.log_file, self.to_stderr = level, log_file, to_stderr
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)

    @property
    def stream(self) -> TextIO:
        # looked up late, so captured output sees it
        return self._stream or (sys.stderr if self.to_stderr else sys.stdout)

    def line(self, text: str = "", *, end: str = "\n", level: int = NORMAL) -> None:
        text = redact(text)  # a URL's credentials never reach a screen or a log
        if self.log_file is not None and end == "\n":  # a live line (\r) is the screen's only
            with self.log_file.open("a") as log:
                log.write(text + end)
        if level <= self.level:
            self.stream.write(text + end)
            self.stream.flush()

    def debug(self, text: str) -> None:
        """A line for -v (and the log file): how a value was decided, where a log went."""
        self.line(f"  {text}", level=VERBOSE)

    def to_log(self, text: str) -> None:
        """A line printed elsewhere (the error on stderr), kept in the log file too."""
        self.line(text, level=LOG_ONLY)

    def result(self, text: str) -> None:
        """What the command produced (the verdict, the index written): shown even with -q."""
        self.line(text, level=QUIET)

    def detail(self, text: str) -> None:
        self.line(f"  {text}")

    def warning(self, text: str) -> None:
        self.line(f"warning: {text}", level=QUIET)

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
        self.result(
            f"\n{path.name}\n  size    {size_mib:.1f} MiB\n  sha256  {sha256}\n"
            + "\n".join(f"  {line}" for line in lines)
        )


reporter = Reporter()
