"""`detect`: what this machine (or a saved one) is."""

from __future__ import annotations

import argparse
from typing import Any

from toolchain.cli.common import add_host_options, host_from_args, print_json


def cmd_detect(args: argparse.Namespace) -> int:
    from toolchain.detect.render import render_host

    host = host_from_args(args)
    if args.json:
        print_json(host.to_json())
    else:
        print(render_host(host))
    host.require_supported()
    return 0


def configure_parser(commands: Any) -> None:
    detect = commands.add_parser("detect", help="report this machine's CPU, memory and tools")
    add_host_options(detect)
    detect.set_defaults(handler=cmd_detect)
