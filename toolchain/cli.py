"""`python -m toolchain COMMAND`: the command line, and the one place errors are caught."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.errors import ToolchainError, UsageError
from toolchain.host import Host, detect_host
from toolchain.plan import BuildOptions, plan_build
from toolchain.recipes import default_recipes_dir, known_versions, load_recipe
from toolchain.report import render_host, render_plan
from toolchain.settings import (
    BUILD_SETTINGS,
    add_setting_flags,
    read_toml_settings,
    resolve_settings,
)

MIB = 1024**2


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


def options_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], BuildOptions]:
    """Settings from flags, VCB_* variables and ./pyproject.toml, as the plan's options."""
    values = resolve_settings(
        BUILD_SETTINGS, vars(args), os.environ, read_toml_settings(Path("pyproject.toml"))
    )
    if values["jobs"] is not None and values["jobs"] < 1:
        raise UsageError(f"--jobs must be at least 1, not {values['jobs']}")
    options = BuildOptions(
        target=values["target"],
        jobs=values["jobs"],
        python=values["python"],
        cxx=values["cxx"],
        sources=_optional_path(values["sources"]),
        source_dir=_optional_path(values["source_dir"]),
        torch_index=values["torch_index"],
        find_links=tuple(Path(p) for p in (values["find_links"] or "").split(os.pathsep) if p),
        work_dir=Path(values["work_dir"]).expanduser(),
        wheel_dir=Path(values["wheel_dir"]),
        reserve_bytes=values["reserve_mib"] * MIB,
    )
    return values, options


def _optional_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def cmd_plan(args: argparse.Namespace) -> int:
    values, options = options_from_args(args)
    recipes_dir = Path(values["recipes"]) if values["recipes"] else default_recipes_dir()
    versions = known_versions(recipes_dir)
    if not versions:
        raise UsageError(f"no recipes in {recipes_dir}", hint="point --recipes at a recipes folder")
    recipe = load_recipe(recipes_dir, values["vllm"] or versions[-1])
    plan = plan_build(host_from_args(args), recipe, options)
    if args.json:
        print_json(plan.to_json())
    else:
        print(render_plan(plan))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m toolchain", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    detect = commands.add_parser("detect", help="report this machine's CPU, memory and tools")
    add_host_options(detect)
    detect.set_defaults(handler=cmd_detect)
    plan = commands.add_parser("plan", help="print what a build would do, decided up front")
    add_host_options(plan)
    add_setting_flags(plan, BUILD_SETTINGS)
    plan.set_defaults(handler=cmd_plan)
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
