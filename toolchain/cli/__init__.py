"""`vllm-cpu-builder COMMAND` (`python -m toolchain COMMAND`): the command line, and the one
place errors are caught.

Each area's commands live in a module of this package with `configure_parser(commands)`;
its handlers parse settings into typed options and call one function of the library, imported
in the handler: the parsers need only the standard library, so `--help` and `--version` work
in a checkout whose dependencies are not installed, and a command that needs one says which.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence
from pathlib import Path

from toolchain import __version__
from toolchain.cli import bench, build, detect, kernel_tests, publish, recipe, verify
from toolchain.cli.common import Parser, configure_output
from toolchain.errors import ToolchainError, ToolMissingError
from toolchain.util.report import reporter
from toolchain.util.urls import redact

MODULE_PROG = "python -m toolchain"
# the import name of each dependency in pyproject.toml, and the name pip installs it by
DEPENDENCIES = {
    "archspec": "archspec>=0.2.7,<0.3",
    "auditwheel": "auditwheel>=6.1",
    "cpuinfo": "py-cpuinfo>=9",
    "packaging": "packaging>=24",
}


def program_name(argv0: str) -> str:
    """How the user ran us: `vllm-cpu-builder` (the installed script) or `python -m toolchain`."""
    name = Path(argv0).name
    return MODULE_PROG if name in ("__main__.py", "-m", "-c", "") else name


def build_parser(prog: str = MODULE_PROG) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Build vLLM for CPUs, verify the wheel, publish it.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for area in (detect, build, recipe, verify, bench, kernel_tests, publish):
        area.configure_parser(commands)
    return parser


# A reader that went away (`python -m toolchain plan | head`): the exit of a program killed by
# SIGPIPE, as `cat` or `yes` end there, so `set -o pipefail` scripts see it as they would for them.
READER_GONE = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; run from a shell (argv None) the program is named as it was run,
    called from Python (tests) it is `python -m toolchain`."""
    prog = program_name(sys.argv[0]) if argv is None else MODULE_PROG
    try:
        try:
            return _run(argv, prog)
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


def _run(argv: Sequence[str] | None, prog: str) -> int:
    try:
        args = build_parser(prog).parse_args(argv)
        configure_output(args)
        return _handle(args, prog)
    except ToolchainError as exc:
        _error(f"error: {redact(exc.message)}")
        if exc.hint:
            _error(f"  next: {redact(exc.hint)}")
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    finally:
        reporter.configure()  # the next run in this process (a test) starts as the default


def _handle(args: argparse.Namespace, prog: str) -> int:
    try:
        code: int = args.handler(args)
    except ModuleNotFoundError as exc:
        missing = _missing_dependency(exc, prog)
        if missing is None:
            raise  # not a dependency: a bug, with its traceback
        raise missing from exc
    return code


def _error(text: str) -> None:
    print(text, file=sys.stderr)
    reporter.to_log(text)


def _missing_dependency(exc: ModuleNotFoundError, prog: str) -> ToolMissingError | None:
    """A dependency of the toolkit that this Python lacks (a checkout run without installing
    it) is a missing program's exit 6, naming what to install; any other import is a bug."""
    top = (exc.name or "").partition(".")[0]
    if top not in DEPENDENCIES:
        return None
    python = sys.executable or "python3"
    return ToolMissingError(
        f"the Python package {top!r} is not installed in {python}: "
        f"{prog} needs {', '.join(DEPENDENCIES.values())}",
        hint=f"install the toolkit into a venv: python3 -m venv .venv && .venv/bin/pip install . "
        f"(then run .venv/bin/vllm-cpu-builder), or pip install '{DEPENDENCIES[top]}'",
    )
