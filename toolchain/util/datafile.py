"""Loading TOML data files with errors that name the file and the key."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError, ToolchainError


def read_text(path: Path) -> str:
    """A text file as UTF-8; DataFileError naming the file when it cannot be read as such."""
    try:
        return path.read_bytes().decode()
    except FileNotFoundError as exc:
        raise DataFileError(f"{path}: file not found") from exc
    except IsADirectoryError as exc:
        raise DataFileError(f"{path}: a folder, not a file") from exc
    except OSError as exc:
        raise DataFileError(f"{path}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


def parse_json(
    text: str | bytes, *, where: str, error: type[ToolchainError] = DataFileError
) -> Any:
    """JSON text (a file, a server's answer, a child's output) as Python values; `error` naming
    `where` when it is not JSON: bad syntax, bytes that are not UTF-8, or arrays and objects
    nested deeper than the parser follows (a RecursionError, not a traceback)."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise error(f"{where}: arrays or objects nested too deeply to read as JSON") from exc
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise error(f"{where}: not JSON ({exc})") from exc


def load_json(path: Path) -> Any:
    """A JSON file; DataFileError naming it when it cannot be read or is not JSON."""
    return parse_json(read_text(path), where=str(path))


def load_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise DataFileError(f"{path}: not valid TOML: {exc}") from exc


def check_keys(data: dict[str, Any], known: set[str], *, where: str) -> None:
    """Refuse keys a table does not have: a typo must not pass silently."""
    unknown = sorted(set(data) - known)
    if unknown:
        raise DataFileError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")


def table(data: dict[str, Any], key: str, *, where: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise DataFileError(f"{where}: key '{key}' must be a table")
    return value


def string(data: dict[str, Any], key: str, *, where: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        raise DataFileError(f"{where}: key '{key}' must be a non-empty string")
    return value


def string_list(data: dict[str, Any], key: str, *, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DataFileError(f"{where}: key '{key}' must be a list of strings")
    return tuple(value)


def string_map(data: dict[str, Any], key: str, *, where: str) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise DataFileError(f"{where}: key '{key}' must be a table of strings")
    return dict(value)


def sha256_hex(data: dict[str, Any], key: str, *, where: str) -> str:
    value = string(data, key, where=where)
    if len(value) != 64 or any(char not in "0123456789abcdef" for char in value):
        raise DataFileError(f"{where}: key '{key}' must be 64 lower-case hex digits (a sha256)")
    return value
