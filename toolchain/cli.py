"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.errors import ToolchainError, UsageError
from toolchain.host import Host, detect_host
from toolchain.report import render_host


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise UsageError(message, hint=f"see: python -m toolchain {self.prog.split()[-1]} --help")


def _existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return path


def add_host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpuinfo",
        type=_existing_file,
        metavar="FILE",
        help="describe the machine of this saved /proc/cpuinfo instead of this one",
    )
    parser.add_argument(
        "--meminfo",
        type=_existing_file,
        metavar="FILE",
        help="use this saved /proc/meminfo instead of this machine's",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def host_from_args(args: argparse.Namespace) -> Host:
    return detect_host(cpuinfo_file=args.cpuinfo, meminfo_file=args.meminfo)


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def cmd_detect(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    if args.json:
        print_json(host.to_json())
    else:
        print(render_host(host))
    host.require_supported()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m toolchain", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    detect = commands.add_parser("detect", help="report this machine's CPU, memory and tools")
    add_host_options(detect)
    detect.set_defaults(handler=cmd_detect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code: int = args.handler(args)
        return code
    except ToolchainError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  next: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
