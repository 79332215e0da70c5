"""Every setting has one name in three places: a TOML key, a VCB_ variable and a flag.

The command line beats the environment, which beats `[tool.vllm-cpu-builder]` in ./pyproject.toml.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError, UsageError
from toolchain.util.datafile import load_toml

ENV_PREFIX = "VCB_"
TOML_TABLE = "vllm-cpu-builder"
PYPI_SIMPLE = "https://pypi.org/simple"
SETTINGS_FILE = "pyproject.toml"  # in the folder a command runs from


@dataclass(frozen=True, kw_only=True)
class Setting:
    name: str
    help: str
    kind: type = str
    default: Any = None
    env_aliases: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def toml_key(self) -> str:
        return self.name.replace("_", "-")


# vLLM's CMAKE_BUILD_TYPE choices that make a wheel to ship (oneDNN is always Release)
BUILD_TYPES = ("Release", "RelWithDebInfo")


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "vllm-cpu-builder")


BUILD_SETTINGS = (
    Setting(name="vllm", help="vLLM version to build (default: the newest recipe)"),
    Setting(name="target", help="ISA target (default: the best this host can build and run)"),
    Setting(
        name="jobs",
        kind=int,
        env_aliases=("MAX_JOBS",),
        help="compile jobs (default: sized to available memory)",
    ),
    Setting(name="python", help="Python version to build for (default: the recipe's preferred)"),
    Setting(
        name="cxx",
        env_aliases=("CXX",),
        help="C++ compiler to use (default: a new enough g++ on PATH, else a provisioned one)",
    ),
    Setting(name="sources", help="local mirror of third-party sources (oneDNN, ACL)"),
    Setting(name="source_dir", help="build this vLLM source tree instead of the PyPI sdist"),
    Setting(name="torch_index", help="index for the PyTorch CPU build (default: the recipe's)"),
    Setting(name="find_links", help="local wheel folders for pip, separated by ':'"),
    Setting(
        name="work_dir",
        default=default_cache_dir(),
        help="cache and build folder (default: ~/.cache/vllm-cpu-builder)",
    ),
    Setting(name="wheel_dir", default="wheels", help="where finished wheels land"),
    Setting(
        name="emulate_cpu",
        default="max",
        help="verify: QEMU's CPU model for a wheel of another architecture (max, graviton3, "
        "neoverse-n1, a64fx, cortex-a72) (default: max)",
    ),
    Setting(
        name="reserve_mib",
        kind=int,
        default=512,
        help="memory kept free beside the compile jobs, MiB (default: 512)",
    ),
    Setting(name="recipes", help="recipes folder (default: the ones shipped with the toolkit)"),
    Setting(
        name="index_url",
        help="public index: the vLLM sdist, install-command's requirements (default: PyPI; "
        "install-command: pip's configured index-url, else PyPI)",
    ),
    Setting(
        name="cache",
        help="a compile cache shared between machines, through sccache: redis://HOST:6379, "
        "s3://BUCKET/PREFIX, webdav+https://HOST/PATH or a folder; credentials only from the "
        "environment (default: ccache, local)",
    ),
    Setting(
        name="dist_scheduler",
        help="compile on sccache-dist build servers: the scheduler's URL (http://HOST:10600); its "
        "client token only from the environment (VCB_DIST_TOKEN) (default: compile here)",
    ),
    Setting(
        name="build_type",
        default="Release",
        help="CMAKE_BUILD_TYPE of vLLM's own kernels: Release, or RelWithDebInfo (its debug "
        "info goes into a separate .debug.tar.gz beside the wheel) (default: Release)",
    ),
    Setting(
        name="allow_cuda_torch",
        kind=bool,
        default=False,
        help="accept a CUDA build of torch in the build venv; needs the CUDA toolkit (default: "
        "refuse)",
    ),
)

PUBLISH_SETTINGS = (
    Setting(
        name="index_dir",
        default="index",
        help="where the static per-variant index is written (default: index)",
    ),
    Setting(name="upload", help="also upload the wheels with twine to this index server URL"),
    Setting(
        name="wheel_variants",
        kind=bool,
        default=False,
        help="also write INDEX/wheel-variants/simple/: variant wheels (PEP 825/850 drafts) "
        "that uv --preview-features wheel-variants chooses from by x86-64 level",
    ),
)

# Every setting, so any command accepts the whole [tool.vllm-cpu-builder] table.
ALL_SETTINGS = BUILD_SETTINGS + PUBLISH_SETTINGS


def settings_named(*names: str) -> tuple[Setting, ...]:
    return tuple(setting for setting in ALL_SETTINGS if setting.name in names)


def add_setting_flags(parser: argparse.ArgumentParser, settings: tuple[Setting, ...]) -> None:
    for setting in settings:
        help_text = f"{setting.help} [{setting.env}]"
        if setting.kind is bool:
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                action="store_const",
                const=True,
                default=None,
                help=help_text,
            )
        else:
            parser.add_argument(
                setting.flag, dest=setting.name, type=setting.kind, default=None, help=help_text
            )


def read_toml_settings(pyproject: Path) -> dict[str, Any]:
    if not pyproject.is_file():
        return {}
    data = load_toml(pyproject)
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise DataFileError(f"{pyproject}: [tool] must be a table")
    section = tool.get(TOML_TABLE, {})
    if not isinstance(section, dict):
        raise DataFileError(f"{pyproject}: [tool.{TOML_TABLE}] must be a table")
    return section


def _convert(setting: Setting, value: Any, origin: str) -> Any:
    """A value from the environment (always a string) as the setting's type; UsageError if not."""
    if setting.kind is bool:
        if str(value).lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return str(value).lower() in {"1", "true", "yes", "on"}
        raise UsageError(f"{origin}: '{value}' is not true or false")
    try:
        return setting.kind(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{origin}: '{value}' is not a valid {setting.kind.__name__}") from exc


def _from_file(setting: Setting, value: Any, origin: str) -> Any:
    """A TOML value must already have the setting's type: no `jobs = true`, `jobs = 2.9`."""
    exact = isinstance(value, setting.kind) and (setting.kind is bool) == isinstance(value, bool)
    if not exact:
        raise DataFileError(
            f"{origin} must be a {setting.kind.__name__}, not {type(value).__name__} {value!r}"
        )
    return value


def resolve_settings(
    settings: tuple[Setting, ...],
    cli: Mapping[str, Any],
    environ: Mapping[str, str],
    file_values: Mapping[str, Any],
) -> dict[str, Any]:
    """Each setting's value: command line, then environment, then file, then default."""
    known = {setting.toml_key for setting in settings}
    unknown = set(file_values) - known
    if unknown:
        raise DataFileError(
            f"{SETTINGS_FILE} [tool.{TOML_TABLE}]: unknown keys {sorted(unknown)}; "
            f"known: {sorted(known)}"
        )
    values: dict[str, Any] = {}
    for setting in settings:
        value = cli.get(setting.name)
        if value is None:
            for var in (setting.env, *setting.env_aliases):
                if environ.get(var):
                    value = _convert(setting, environ[var], var)
                    break
        if value is None and setting.toml_key in file_values:
            value = _from_file(
                setting,
                file_values[setting.toml_key],
                f"{SETTINGS_FILE} [tool.{TOML_TABLE}] {setting.toml_key}",
            )
        values[setting.name] = setting.default if value is None else value
    return values
