"""What every command of the command line shares: the parser, settings, JSON output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.errors import UsageError
from toolchain.settings import (
    ALL_SETTINGS,
    SETTINGS_FILE,
    Resolved,
    read_toml_settings,
    resolve_settings,
    settings_of,
)
from toolchain.util.report import NORMAL, QUIET, VERBOSE, reporter
from toolchain.util.urls import redact_json

if TYPE_CHECKING:  # the library is imported where a command runs (see toolchain/cli/__init__)
    from toolchain.detect.host import Host
    from toolchain.plan.recipes import Recipe


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise UsageError(message, hint=f"see: {self.prog} --help")  # prog names the command

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but a flag the command does not know sends to that command's help
        (argparse reports it from the top parser, which knows no command)."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            command = getattr(parsed, "command", None)
            raise UsageError(
                f"unrecognized arguments: {' '.join(unknown)}",
                hint=f"see: {' '.join(filter(None, [self.prog, command]))} --help",
            )
        return parsed


def existing_file(value: str) -> Path:
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: a folder, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return path


def utilization(value: str) -> float:
    """A share of memory, as vLLM's --gpu-memory-utilization takes it: above 0, at most 1."""
    try:
        share = float(value)
    except ValueError:
        share = math.nan
    if not (math.isfinite(share) and 0 < share <= 1):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a share of memory: give a number above 0 and at most 1, "
            "such as 0.9 (vLLM's default is 0.92)"
        )
    return share


def print_json(data: object) -> None:
    json.dump(redact_json(data), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def settings_values(args: argparse.Namespace) -> Resolved:
    """Every setting: flags, then VCB_* variables, then ./pyproject.toml, then defaults; with -v
    the command's own, each with where it came from."""
    values = resolve_settings(
        ALL_SETTINGS, vars(args), os.environ, read_toml_settings(Path(SETTINGS_FILE))
    )
    for setting in settings_of(getattr(args, "command", "") or ""):
        origin = values.origins[setting.name]
        reporter.debug(f"{setting.name} = {values[setting.name]!r} ({origin})")
    return values


def add_host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpuinfo",
        type=existing_file,
        metavar="FILE",
        help="describe the machine of this saved /proc/cpuinfo instead of this one",
    )
    parser.add_argument(
        "--meminfo",
        type=existing_file,
        metavar="FILE",
        help="use this saved /proc/meminfo instead of this machine's",
    )
    parser.add_argument(
        "--probe-output",
        type=existing_file,
        metavar="FILE",
        help="with --cpuinfo: the saved output of the CPU probe (cpuprobe) run on that machine; "
        "it decides the features, as the probe does here",
    )
    add_mac_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_mac_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sysctl",
        type=existing_file,
        metavar="FILE",
        help="describe the Mac of this saved `sysctl -a` (with --vm-stat) instead of this machine",
    )
    parser.add_argument(
        "--vm-stat",
        type=existing_file,
        metavar="FILE",
        help="with --sysctl: the saved `vm_stat` of that Mac (its available memory)",
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """-q/-v/--log-file of the long commands, applied to the one reporter (`configure_output`)."""
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-q", "--quiet", action="store_true", help="print only warnings, errors and the result"
    )
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print more: each setting's value and where it came from, each program's log",
    )
    parser.add_argument(
        "--log-file",
        type=Path,
        metavar="FILE",
        help="also write every line (as with --verbose) to FILE, appended",
    )


def configure_output(args: argparse.Namespace) -> None:
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    level = QUIET if quiet else VERBOSE if verbose else NORMAL
    reporter.configure(
        level=level,
        log_file=getattr(args, "log_file", None),
        to_stderr=bool(getattr(args, "json", False)),
    )


def host_from_args(args: argparse.Namespace) -> Host:
    from toolchain.detect.host import detect_host

    return detect_host(
        cpuinfo_file=args.cpuinfo,
        meminfo_file=args.meminfo,
        probe_file=args.probe_output,
        sysctl_file=args.sysctl,
        vm_stat_file=args.vm_stat,
    )


def _recipes_folder(folder: str | None) -> tuple[Path, list[str]]:
    """--recipes (default: the shipped recipes) and the versions it has."""
    from toolchain.plan.recipes import known_versions
    from toolchain.targets import default_recipes_dir

    recipes_dir = Path(folder) if folder else default_recipes_dir()
    known = known_versions(recipes_dir)
    if not known:
        raise UsageError(f"no recipes in {recipes_dir}", hint="point --recipes at a recipes folder")
    return recipes_dir, known


def recipes_from(folder: str | None, versions: list[str] | None = None) -> list[Recipe]:
    """The recipes of these versions (default: every one)."""
    from toolchain.plan.recipes import load_recipe

    recipes_dir, known = _recipes_folder(folder)
    return [load_recipe(recipes_dir, version) for version in versions or known]


def recipe_from_values(values: dict[str, Any]) -> Recipe:
    """The recipe of --vllm, or the newest."""
    from toolchain.plan.recipes import load_recipe

    recipes_dir, known = _recipes_folder(values["recipes"])
    return load_recipe(recipes_dir, values["vllm"] or known[-1])
