"""Every setting declared once (#34): the flags, the environment, the docs and the origins all
come from toolchain/settings.py's SETTINGS."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from toolchain import settings
from toolchain.cli import build_parser
from toolchain.errors import UsageError
from toolchain.options import BuildOptions, build_options
from toolchain.settings import SETTINGS, Setting, render_docs, resolve_settings

ROOT = Path(__file__).resolve().parents[1].parent
# flags named like a setting that mean something else on these commands: matrix takes each
# of its flags repeated (a list of cells); verify, check-kernels and install-command's --python is a
# Python program to check or install into, not the version to build for; new-recipe's --vllm is
# the (required) release to write a recipe for, which has none yet
NOT_SETTINGS = {
    "new-recipe": {"--vllm"},
    "matrix": {"--vllm", "--target", "--python", "--recipes", "--cache", "--arch"},
    "fetch-sources": {"--arch"},  # the mirror's architectures, "all" too: not the wheel's
    "verify": {"--python"},
    "check-kernels": {"--python"},
    "install-command": {"--python"},
}


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_docs_options_md_is_generated_from_the_table() -> None:
    """`nox -s docs` (python -m toolchain.settings --write-docs) writes it; CI fails on drift."""
    assert (ROOT / "docs" / "options.md").read_text() == render_docs()


def test_each_command_has_the_flags_of_its_settings_and_no_stray_ones() -> None:
    commands = _commands()
    by_flag = {setting.flag: setting for setting in SETTINGS}
    for name, parser in commands.items():
        flags = {o for action in parser._actions for o in action.option_strings}
        declared = {s.flag for s in SETTINGS if name in s.commands}
        assert declared <= flags, name
        strays = {f for f in flags & set(by_flag) if f not in declared}
        assert strays == NOT_SETTINGS.get(name, set()), name
    assert {c for s in SETTINGS for c in s.commands} <= set(commands)


def test_each_value_records_where_it_came_from() -> None:
    resolved = resolve_settings(
        SETTINGS,
        {"target": "avx2"},
        {"MAX_JOBS": "3", "VCB_BUILD_TYPE": "RelWithDebInfo"},
        {"reserve-mib": 1024},
    )
    assert resolved["jobs"] == 3 and resolved["reserve_mib"] == 1024
    assert resolved.origins["target"] == "flag"
    assert resolved.origins["jobs"] == "env MAX_JOBS"
    assert resolved.origins["build_type"] == "env VCB_BUILD_TYPE"
    assert resolved.origins["reserve_mib"] == "toml"
    assert resolved.origins["wheel_dir"] == "default"
    assert resolved.origins["vllm"] == "recipe" and resolved.origins["cache"] == "none"
    options = build_options(resolved)
    assert options.origins["jobs"] == "env MAX_JOBS"
    assert "index_dir" not in options.origins  # a publish setting: not the build's


@pytest.mark.parametrize(
    ("cli", "environ", "message"),
    [
        ({"jobs": 0}, {}, "--jobs must be at least 1, not 0"),
        ({}, {"VCB_RESERVE_MIB": "-1"}, "--reserve-mib must be 0 or more, not -1"),
        ({}, {"VCB_BUILD_TYPE": "Debug"}, "--build-type is Release or RelWithDebInfo"),
    ],
)
def test_the_tables_checks_hold_for_every_source(
    cli: dict[str, object], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_settings(SETTINGS, cli, environ, {})


def test_a_new_setting_is_one_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial change 2 of #34: its flag, variable, TOML key, check and docs row from the entry."""
    entry = Setting(name="link_jobs", commands=("build-wheel",), kind=int, minimum=1, help="x")
    monkeypatch.setattr(settings, "SETTINGS", (*SETTINGS, entry))
    parser = _commands()["build-wheel"]
    assert parser.parse_args(["--link-jobs", "2"]).link_jobs == 2
    assert "--link-jobs" not in {o for a in _commands()["plan"]._actions for o in a.option_strings}
    resolved = resolve_settings(settings.SETTINGS, {}, {}, {"link-jobs": 4})
    assert resolved["link_jobs"] == 4 and resolved.origins["link_jobs"] == "toml"
    with pytest.raises(UsageError, match="--link-jobs must be at least 1"):
        resolve_settings(settings.SETTINGS, {}, {"VCB_LINK_JOBS": "0"}, {})
    assert "| `--link-jobs` | `VCB_LINK_JOBS` | `link-jobs` | int |" in render_docs()
    # and the stages read it with no field in toolchain/options.py
    assert build_options(resolved).get("link_jobs", int) == 4
    assert BuildOptions().get_optional("link_jobs", int) is None


def test_options_get_reads_the_build_settings_that_have_no_field() -> None:
    options = build_options(resolve_settings(SETTINGS, {}, {"VCB_EMULATE_CPU": "a64fx"}, {}))
    assert options.get("emulate_cpu", str) == "a64fx"
    assert BuildOptions().get("emulate_cpu", str) == "max"  # the table's default
    assert options.get_optional("recipes", str) is None
    with pytest.raises(TypeError, match="recipes may be unset"):
        options.get("recipes", str)
    with pytest.raises(TypeError, match="emulate_cpu is a str"):
        options.get("emulate_cpu", int)
    with pytest.raises(KeyError, match=r"read options\.reserve_bytes"):
        options.get("reserve_mib", int)
    with pytest.raises(KeyError, match=r"read options\.target"):
        options.get("target", str)
    with pytest.raises(KeyError, match="no build setting"):
        options.get("index_dir", str)  # publish's
