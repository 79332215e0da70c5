"""The command line's own edges (#31): a reader that goes away, nested JSON, the hints it gives."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator

import pytest

from toolchain.cli import READER_GONE, main


@contextlib.contextmanager
def closed_pipe() -> Iterator[io.TextIOWrapper]:
    """stdout is a pipe whose reader has gone, as in `python -m toolchain matrix | head -0`
    (set inside the test: pytest's capsys sets sys.stdout again after fixtures are set up)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    saved = sys.stdout
    with open(write_end, "w") as stream:
        sys.stdout = stream
        try:
            yield stream
        finally:
            sys.stdout = saved


def test_a_reader_that_goes_away_ends_the_run_quietly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with closed_pipe() as stream:
        assert main(["matrix", "--arch", "x86_64", "--vllm", "0.32.0"]) == READER_GONE == 141
        print("more output", file=stream)  # as Python's own flush at exit: no second error
        stream.flush()
    assert capsys.readouterr().err == ""


def test_help_into_a_closed_pipe_ends_quietly_too() -> None:
    with closed_pipe() as stream:
        try:
            code = main(["--help"])
        except SystemExit as exc:  # argparse ends --help with SystemExit(0) once printed
            code = exc.code
        assert code == READER_GONE
        stream.flush()


def test_a_broken_pipe_that_is_not_the_output_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EPIPE from a child or a socket is a real failure: not swallowed as `| head` would be."""
    from toolchain.cli import build

    def broken(_: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(build, "cmd_matrix", broken)
    with pytest.raises(BrokenPipeError):
        main(["matrix", "--arch", "x86_64"])
