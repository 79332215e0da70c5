"""pip's own configuration of where packages come from, read the way pip reads it.

pip merges its configuration files in the order global, user, site, PIP_CONFIG_FILE, then the
PIP_* environment variables; within that merge an `[install]` value beats a `[global]` one
(pip/_internal/configuration.py). PIP_CONFIG_FILE naming an existing file skips the user files;
naming os.devnull skips every file. Only the options that say where packages come from are read.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import UsageError

# option -> the names pip takes for it (its long flags), in files and as PIP_* variables
OPTIONS = {
    "index-url": ("index-url", "pypi-url"),
    "extra-index-url": ("extra-index-url",),
    "find-links": ("find-links",),
}
SECTIONS = ("global", "install")  # later beats earlier, as pip orders them for `pip install`
CONFIG_NAME = "pip.conf"
SYSTEM_DIR = Path("/etc")  # pip's last global folder on Linux, after $XDG_CONFIG_DIRS/pip


@dataclass(frozen=True, kw_only=True)
class PipConfig:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict)  # option -> file [section] or var

    def origin(self, option: str) -> str:
        return self.origins.get(option, "")


def python_prefix(python: Path) -> Path:
    """The sys.prefix of `python` (whose pip.conf is pip's site file): a venv's or /usr's."""
    if Path(python) == Path(sys.executable):
        return Path(sys.prefix)
    return Path(python).absolute().parent.parent


def config_files(environ: Mapping[str, str], prefix: Path) -> list[Path]:
    """The files pip reads, lowest precedence first; `prefix` is the target Python's sys.prefix
    (its site file)."""
    chosen = environ.get("PIP_CONFIG_FILE")
    if chosen == os.devnull:
        return []
    home = Path(environ.get("HOME") or Path.home())
    xdg_dirs = (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    user_dir = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(d) / "pip" / CONFIG_NAME for d in xdg_dirs if d] + [SYSTEM_DIR / CONFIG_NAME]
    if not (chosen and Path(chosen).exists()):
        files += [home / ".pip" / CONFIG_NAME, user_dir / "pip" / CONFIG_NAME]
    files.append(prefix / CONFIG_NAME)
    return files + ([Path(chosen)] if chosen else [])


def read_pip_config(environ: Mapping[str, str], prefix: Path) -> PipConfig:
    """Where pip installing into the Python at `prefix` takes packages from, and from which file
    or variable each option came."""
    found: dict[str, tuple[str, str]] = {}  # option -> (value, origin)
    for section in SECTIONS:  # the section outranks the file: [install] anywhere beats [global]
        for path in config_files(environ, prefix):
            for option, value in _file_options(path, section):
                found[option] = (value, f"{path} [{section}]")
    for option, value, variable in _environment_options(environ):
        found[option] = (value, variable)
    return PipConfig(
        index_url=found["index-url"][0].strip() if "index-url" in found else None,
        extra_index_urls=tuple(found.get("extra-index-url", ("", ""))[0].split()),
        find_links=tuple(found.get("find-links", ("", ""))[0].split()),
        origins={option: origin for option, (_, origin) in found.items()},
    )


def _file_options(path: Path, section: str) -> Iterator[tuple[str, str]]:
    if not path.is_file():
        return
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError, OSError) as exc:
        raise UsageError(
            f"pip's configuration file {path} cannot be read: {exc}",
            hint="fix it (pip refuses it too: `pip config list`), or set PIP_CONFIG_FILE",
        ) from exc
    if parser.has_section(section):
        for key, value in parser.items(section):
            option = _option(key)
            if option:
                yield option, value


def _environment_options(environ: Mapping[str, str]) -> Iterator[tuple[str, str, str]]:
    for variable, value in sorted(environ.items()):
        if variable.startswith("PIP_") and (option := _option(variable[4:])):
            yield option, value, variable


def _option(key: str) -> str | None:
    """The option a config key or PIP_* suffix names (pip: lower case, '_' as '-')."""
    name = key.lower().replace("_", "-").removeprefix("--")
    return next((option for option, names in OPTIONS.items() if name in names), None)
