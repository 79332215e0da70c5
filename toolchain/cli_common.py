"""What every command of the command line shares: the parser, settings, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from toolchain.errors import UsageError
from toolchain.settings import ALL_SETTINGS, read_toml_settings, resolve_settings


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise UsageError(message, hint=f"see: python -m toolchain {self.prog.split()[-1]} --help")


def existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return path


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def settings_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting: flags, then VCB_* variables, then ./pyproject.toml, then defaults."""
    return resolve_settings(
        ALL_SETTINGS, vars(args), os.environ, read_toml_settings(Path("pyproject.toml"))
    )
