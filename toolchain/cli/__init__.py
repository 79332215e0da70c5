"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught.

Each area's commands live in a module of this package with `configure_parser(commands)`;
its handlers parse settings into typed options and call one function of the library.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence

from toolchain.cli import build, detect, publish, recipe, verify
from toolchain.cli.common import Parser
from toolchain.errors import ToolchainError
from toolchain.util.urls import redact


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m toolchain", description="Build vLLM for CPUs, verify the wheel, publish it."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for area in (detect, build, recipe, verify, publish):
        area.configure_parser(commands)
    return parser


# A reader that went away (`python -m toolchain plan | head`): the exit of a program killed by
# SIGPIPE, as `cat` or `yes` end there, so `set -o pipefail` scripts see it as they would for them.
READER_GONE = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # buffered output meets a closed pipe here, not at exit
    except BrokenPipeError:
        if not _silence_closed_pipes():
            raise  # a pipe to a child or a socket, not our output: not ours to hide
        return READER_GONE


def _silence_closed_pipes() -> bool:
    """Point stdout and stderr at /dev/null when their reader has gone, so nothing (not even
    Python's last flush at exit) writes to them again; False when neither has gone (the
    way CPython's documentation of SIGPIPE and pip handle it)."""
    closed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            descriptor = stream.fileno()
        except (AttributeError, OSError, ValueError):  # replaced by a test, or closed
            continue
        poller = select.poll()
        poller.register(descriptor, select.POLLOUT)
        if any(events & select.POLLERR for _, events in poller.poll(0)):
            os.dup2(os.open(os.devnull, os.O_WRONLY), descriptor)
            closed = True
    return closed


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.handler(args)
        return code
    except ToolchainError as exc:
        print(f"error: {redact(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"  next: {redact(exc.hint)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
