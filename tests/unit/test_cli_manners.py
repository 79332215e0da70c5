"""What a user of the command line notices first (#33): the program's name and version, a
checkout without its dependencies, exit codes as documented, -q/-v/--log-file."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from toolchain import __version__, errors
from toolchain.cli import DEPENDENCIES, build_parser, main, program_name
from toolchain.util.report import NORMAL, QUIET, VERBOSE, Reporter

ROOT = Path(__file__).resolve().parents[2]


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse ends --help and --version this way
        return int(exc.code or 0)


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit(["--version"]) == 0
    assert capsys.readouterr().out == f"python -m toolchain {__version__}\n"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [
        ("/venv/bin/vllm-cpu-builder", "vllm-cpu-builder"),
        ("/work/toolchain/__main__.py", "python -m toolchain"),
    ],
)
def test_hints_name_the_program_as_it_was_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv0: str, prog: str
) -> None:
    assert program_name(argv0) == prog
    monkeypatch.setattr(sys, "argv", [argv0, "plan", "--bogus"])
    assert main() == 2
    err = capsys.readouterr().err
    assert f"  next: see: {prog} plan --help\n" in err
    assert "toolchain toolchain" not in err


def test_a_missing_dependency_is_exit_6_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_probe: None
) -> None:
    """A checkout run without the install step: `python3 -m toolchain detect` and no archspec."""
    monkeypatch.setitem(sys.modules, "archspec", None)
    monkeypatch.setitem(sys.modules, "archspec.cpu", None)
    assert main(["detect"]) == 6
    err = capsys.readouterr().err
    assert "'archspec' is not installed" in err
    assert "pip install 'archspec>=0.2.7,<0.3'" in err and "Traceback" not in err


def test_dependencies_named_are_those_of_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(DEPENDENCIES.values()) <= set(declared)


def _top_level_imports(module: str) -> set[str]:
    """The modules `module` imports when it is imported (not in a function, not for mypy)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def imports_of(start: str) -> set[str]:
    """Every module importing `start` imports, following the toolkit's own modules."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _top_level_imports(module):
            is_file = (ROOT / (name.replace(".", "/") + ".py")).is_file()
            is_package = (ROOT / name.replace(".", "/") / "__init__.py").is_file()
            if name.startswith("toolchain") and (is_file or is_package):
                todo.append(name)
            elif not name.startswith("toolchain"):
                seen.add(name)
    return seen


def test_help_and_version_need_no_dependency() -> None:
    """The parsers import only the standard library and the toolkit's light modules."""
    imported = imports_of("toolchain.cli")
    assert {name.partition(".")[0] for name in imported} & set(DEPENDENCIES) == set()
    assert "toolchain.plan.planner" not in imported
    assert "toolchain.verify.registry" not in imported  # it imports every check, by name


def test_the_import_checker_sees_a_dependency() -> None:
    assert "packaging.version" in imports_of("toolchain.plan.recipes")
    assert "toolchain.plan.recipes" in imports_of("toolchain.plan.planner")


# the exit codes of docs/cli.md: `Exit codes (...): 0 fine, 1 ..., 2 usage, ...`
def documented_exit_codes() -> dict[int, str]:
    page = (ROOT / "docs" / "cli.md").read_text()
    table = page[page.index("Exit codes (every command") :].split("\n\n")[0]
    table = table.split("):", 1)[1]
    return {int(code): text.strip() for code, text in re.findall(r"(\d+) ([^,]+)", table)}


def test_every_error_class_has_its_exit_code_documented() -> None:
    documented = documented_exit_codes()
    classes = {
        value.exit_code: name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.ToolchainError)
    }
    codes_of_classes = set(classes) - {errors.ToolchainError.exit_code}  # 1: only the base
    assert codes_of_classes <= set(documented), sorted(codes_of_classes - set(documented))
    # every documented code from 2 up to the signals is one class's
    assert {code for code in documented if 1 < code < 128} == codes_of_classes
    assert len(classes) == len(
        [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    ), "two classes share an exit code"


def test_the_table_reader_sees_the_codes() -> None:
    documented = documented_exit_codes()
    assert documented[0] == "fine" and documented[6] == "a missing program"
    assert documented[141].startswith("the output's reader went")


def test_install_command_with_uv_missing_is_a_missing_program(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_programs: Any,
    no_probe: None,
) -> None:
    (tmp_path / "variants.json").write_text('{"variants": {}}')
    python = fake_programs.add("python3")
    monkeypatch.setattr(sys, "executable", str(python))  # no uv beside it either
    argv = ["install-command", "--installer", "uv", "--index-dir", str(tmp_path)]
    assert main([*argv, "--python", str(python)]) == errors.ToolMissingError.exit_code == 6
    assert "uv is not installed" in capsys.readouterr().err


def test_check_kernels_of_a_vllm_without_cpu_kernels_is_exit_11(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_programs: Any, no_probe: None
) -> None:
    """A vLLM with no kernel library (_C*.so): no vLLM to check (11), not a usage error (2)."""
    vllm = tmp_path / "site-packages" / "vllm"
    vllm.mkdir(parents=True)
    (vllm / "__init__.py").write_text("")
    python = fake_programs.add("python3", f"{vllm}\n")
    code = main(["check-kernels", "--python", str(python)])
    err = capsys.readouterr().err
    assert code == errors.KernelCheckError.exit_code == 11, err
    assert "not a CPU build of vLLM" in err


def test_quiet_verbose_and_the_log_file(tmp_path: Path) -> None:
    shown: list[str] = []

    class Screen:
        def write(self, text: str) -> None:
            shown.append(text)

        def flush(self) -> None:
            pass

    log = tmp_path / "logs" / "run.log"
    reporter = Reporter(Screen())  # type: ignore[arg-type]
    for level in (QUIET, NORMAL, VERBOSE):
        reporter.configure(level=level, log_file=log)
        reporter.line("step")
        reporter.debug("why")
        reporter.warning("careful")
        reporter.result("the wheel")
        reporter.line("[12/100]", end="\r")  # a live line stays on the screen
    assert "".join(shown) == (
        "warning: careful\nthe wheel\n"  # -q
        "step\nwarning: careful\nthe wheel\n[12/100]\r"
        "step\n  why\nwarning: careful\nthe wheel\n[12/100]\r"  # -v
    )
    assert log.read_text().count("step\n  why\nwarning: careful\nthe wheel\n") == 3


def test_output_flags_of_the_long_commands() -> None:
    parser = build_parser()
    for command, needs in (
        ("build-wheel", []),
        ("verify", []),
        ("bench", [__file__]),  # bench's wheel must exist; any file does for parsing
        ("kernel-tests", [__file__]),
        ("publish", []),
        ("fetch-sources", ["--to", "mirror"]),
    ):
        args = parser.parse_args([command, *needs, "-q", "--log-file", "run.log"])
        assert args.quiet and args.log_file == Path("run.log")
        assert parser.parse_args([command, *needs, "--verbose"]).verbose
    with pytest.raises(errors.UsageError):
        parser.parse_args(["publish", "-q", "-v"])


def test_publish_quiet_prints_only_its_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_wheel: Any
) -> None:
    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable")
    log = tmp_path / "publish.log"
    folders = ["--wheel-dir", str(tmp_path / "wheels"), "--index-dir", str(tmp_path / "ix")]
    assert main(["publish", *folders, "-q", "--log-file", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("index ") and out.count("\n") == 1, out
    assert out in log.read_text()


def test_verbose_says_where_each_setting_came_from(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_wheel: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable")
    monkeypatch.setenv("VCB_WHEEL_DIR", str(tmp_path / "wheels"))
    assert main(["publish", "-v", "--index-dir", str(tmp_path / "ix")]) == 0
    out = capsys.readouterr().out
    assert f"  wheel_dir = '{tmp_path / 'wheels'}' (env VCB_WHEEL_DIR)\n" in out
    assert f"  index_dir = '{tmp_path / 'ix'}' (flag)\n" in out
    assert "  wheel_variants = False (default)\n" in out
