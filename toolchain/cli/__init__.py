"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught.

Each area's commands live in a module of this package with `configure_parser(commands)`;
its handlers parse settings into typed options and call one function of the library.
"""

from __future__ import annotations

import argparse
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


def main(argv: Sequence[str] | None = None) -> int:
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
