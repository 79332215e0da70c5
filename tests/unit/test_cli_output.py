"""The command line's own edges (#31): a reader that goes away, nested JSON, the hints it gives."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import READER_GONE, build_parser, main
from toolchain.errors import DataFileError, KernelCheckError
from toolchain.util.datafile import parse_json
from toolchain.util.simple_api import PageError, parse_project_page
from toolchain.util.source_lock import LOCK_NAME, read_lock
from toolchain.verify.environment import probe
from toolchain.wheelfile import MANIFEST_NAME


@contextlib.contextmanager
def closed_pipe() -> Iterator[io.TextIOWrapper]:
    """stdout is a pipe whose reader has gone, as in `python -m toolchain matrix | head -0`
    (set inside the test: pytest's capsys sets sys.stdout again after fixtures are set up)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    saved = sys.stdout
    with open(write_end, "w") as stream:
        sys.stdout = stream
        try:
            yield stream
        finally:
            sys.stdout = saved


def test_a_reader_that_goes_away_ends_the_run_quietly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with closed_pipe() as stream:
        assert main(["matrix", "--arch", "x86_64", "--vllm", "0.32.0"]) == READER_GONE == 141
        print("more output", file=stream)  # as Python's own flush at exit: no second error
        stream.flush()
    assert capsys.readouterr().err == ""


def test_help_into_a_closed_pipe_ends_quietly_too() -> None:
    with closed_pipe() as stream:
        try:
            code = main(["--help"])
        except SystemExit as exc:  # argparse ends --help with SystemExit(0) once printed
            code = exc.code
        assert code == READER_GONE
        stream.flush()


def test_a_broken_pipe_that_is_not_the_output_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EPIPE from a child or a socket is a real failure: not swallowed as `| head` would be."""
    from toolchain.cli import build

    def broken(_: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(build, "cmd_matrix", broken)
    with pytest.raises(BrokenPipeError):
        main(["matrix", "--arch", "x86_64"])


# F15: JSON nested deeper than the parser follows (a RecursionError) is bad data like any other
DEEP = "[" * 100_000 + "]" * 100_000
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def tools(fake_programs: Any) -> None:
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")


def _one_error_line(code: int, expected: int, err: str) -> None:
    assert code == expected, err
    assert err.startswith("error: ") and "nested too deeply" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("command", "code"), [("verify", 4), ("publish", 12)])
def test_a_deeply_nested_manifest_in_a_wheel_is_one_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_wheel: Callable[..., Path],
    command: str,
    code: int,
) -> None:
    wheels = tmp_path / "wheels"
    wheel = make_wheel(wheels, "vllm", "0.32.0+cpu.avx2", extra_info={MANIFEST_NAME: DEEP.encode()})
    argv = {
        "verify": ["verify", str(wheel), "--work-dir", str(tmp_path / "work")],
        "publish": ["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "i")],
    }[command]
    got = main(argv)
    _one_error_line(got, code, capsys.readouterr().err)
    assert not (tmp_path / "i").exists()


def test_a_deeply_nested_variants_json_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tools: None, no_probe: None
) -> None:
    (tmp_path / "variants.json").write_text(DEEP)
    got = main(["install-command", "--index-dir", str(tmp_path)])
    _one_error_line(got, 12, capsys.readouterr().err)


def test_plan_passes_over_a_deeply_nested_manifest_beside_the_wheels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tools: None
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = "vllm-0.32.0+cpu.portable-cp311-cp311-linux_x86_64.whl.manifest.json"
    (wheels / name).write_text(DEEP)
    machine = ["--cpuinfo", str(FIXTURES / "cpuinfo" / "x86-zen4.txt")]
    machine += ["--meminfo", str(FIXTURES / "meminfo" / "buildhost-24g.txt")]
    assert main(["plan", "--vllm", "0.32.0", "--wheel-dir", str(wheels), *machine]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_each_reader_of_json_names_what_it_read(tmp_path: Path, fake_programs: Any) -> None:
    with pytest.raises(DataFileError, match=r"sources.lock.json: arrays or objects nested"):
        (tmp_path / LOCK_NAME).write_text(DEEP)
        read_lock(tmp_path)
    page = "https://index.example/simple/vllm/"
    # a page is the index's answer, not a data file: PageError, which callers name with the URL
    with pytest.raises(PageError, match="not a PEP 691 page: arrays or objects nested"):
        parse_project_page(DEEP.encode(), "application/vnd.pypi.simple.v1+json", page)
    python = fake_programs.add("python3", "RESULT " + DEEP + "\n")
    with pytest.raises(KernelCheckError, match="report: arrays or objects nested"):
        probe(python, tmp_path)
    with pytest.raises(DataFileError, match="not JSON"):
        parse_json(b"\xff", where="x")


def test_a_server_answering_deeply_nested_json_is_a_problem_not_a_crash() -> None:
    from toolchain.verify import engine_checks, openai_api

    def fetch(url: str, body: bytes | None = None) -> tuple[int, bytes]:
        return 200, DEEP.encode()

    with pytest.raises(DataFileError):
        openai_api.exercise("http://127.0.0.1:1", "m", fetch)
    assert engine_checks.marked("RESULT " + DEEP, "RESULT ") == {}


def test_json_is_read_through_one_helper() -> None:
    """Every reader goes through util/datafile.parse_json, so no new one forgets the above."""
    readers = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "toolchain").rglob("*.py"))
        if path.name != "datafile.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "json.load" in line
    ]
    assert readers == []


# F21: every hint names commands, sessions, flags, files and doc parts that exist
FLAG = re.compile(r"--[a-z][\w-]*")
SPAN = re.compile(
    r"`([^`]+)`|nox -s [\w-]+(?: -- [^;,()`]*)?|python -m toolchain[^;,()`]*"
    r"|\b(?:apt-get|git|pip|twine|uv) [^;,()`]*"  # another program's flags are not ours
)
OTHER_PROGRAMS = {"apt-get", "git", "pip", "twine", "uv"}


def _flags_by_command() -> dict[str, set[str]]:
    """Each command's flags, from the parser itself; '' is `python -m toolchain` alone."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = {"": {o for a in parser._actions for o in a.option_strings}}
    for name, command in sub.choices.items():
        flags[name] = {o for a in command._actions for o in a.option_strings}
    return flags


def _sessions() -> set[str]:
    """The sessions noxfile.py defines: `@nox.session` (its function's name) or `(name=...)`."""
    sessions = set()
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        for decorator in getattr(node, "decorator_list", []):
            if ast.unparse(decorator).startswith("nox.session"):
                names = [
                    k.value.value
                    for k in getattr(decorator, "keywords", [])
                    if k.arg == "name" and isinstance(k.value, ast.Constant)
                ]
                sessions.add(names[0] if names else node.name)  # type: ignore[attr-defined]
    return sessions


def _text(node: ast.expr) -> str:
    """A string literal's text; an f-string's with `{}` for each value; '' for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join("{}" if isinstance(v, ast.FormattedValue) else _text(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    return ""


def package_hints() -> list[tuple[str, str]]:
    """(file:line, text) of every hint the package can print: `hint=` of its errors, `fix=` of
    verify's results, and the *HINT* constants and tables they are taken from."""
    found = []
    for path in sorted((ROOT / "toolchain").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            values: list[ast.expr | None] = []
            if isinstance(node, ast.keyword) and node.arg in ("hint", "fix"):
                values = [node.value]
            elif isinstance(node, ast.Assign) and "HINT" in ast.unparse(node.targets[0]):
                dict_values = node.value.values if isinstance(node.value, ast.Dict) else []
                values = list(dict_values) or [node.value]
            found += [
                (f"{path.relative_to(ROOT)}:{value.lineno}", _text(value))
                for value in values
                if value is not None and _text(value)
            ]
    return found


def _in_spans(hint: str) -> list[str]:
    """What the command spans of `hint` name wrongly: `nox -s X -- ...`, `python -m toolchain
    X ...`, a backticked `X ...`; their flags must be X's."""
    flags, sessions, wrong = _flags_by_command(), _sessions(), []
    for span in SPAN.finditer(hint):
        words = (span.group(1) or span.group(0)).split()
        if words[0] in OTHER_PROGRAMS:
            continue
        if words[:2] == ["nox", "-s"]:
            if words[2] not in sessions:
                wrong.append(f"nox session {words[2]}")
            named, words = (words[2], words[4:]) if words[2] in flags else (None, [])
        elif words[:3] == ["python", "-m", "toolchain"]:
            words = words[3:]
            named = "" if not words or words[0].startswith("-") else words.pop(0)
        else:
            named = words.pop(0) if words[0] in flags else None
        if named is not None and named not in flags:
            wrong.append(f"command {named}")
        elif named is not None:
            found = FLAG.findall(" ".join(words))
            wrong += [f"{f} of {named or 'toolchain'}" for f in found if f not in flags[named]]
    return wrong


def _outside_spans(hint: str, command: str | None) -> list[str]:
    """Flags outside command spans: `command`'s (the one that printed the hint), or, when
    that is not known, some command's; files and parts of the README or a docs/ page that exist
    (`(docs/plan.md: Targets)` names a `## Targets` heading or a `**Targets**` paragraph there)."""
    flags = _flags_by_command()
    allowed = flags[command] if command is not None else set().union(*flags.values())
    rest = SPAN.sub(" ", hint)
    wrong = [f"{f} of {command or 'any command'}" for f in FLAG.findall(rest) if f not in allowed]
    paths = re.findall(r"\b(?:recipes|docs)/[\w./-]+\w", hint)
    wrong += [f"file {p}" for p in paths if "{}" not in p and not (ROOT / p).exists()]
    parts = [
        (page, name)
        for page, names in re.findall(r"(README|docs/[\w-]+\.md): ([^)]+)", hint)
        for name in names.split(", ")
    ]
    return wrong + [f"{page} {name}" for page, name in parts if not _doc_has(page, name)]


def _doc_has(page: str, name: str) -> bool:
    path = ROOT / ("README.md" if page == "README" else page)
    text = path.read_text() if path.is_file() else ""
    return f"## {name}" in text or f"**{name}**" in text


def wrong_references(hint: str, command: str | None = None) -> list[str]:
    """What `hint` names that does not exist, or that the command printing it does not have."""
    return _in_spans(hint) + _outside_spans(hint, command)


def test_every_hint_in_the_package_names_what_exists() -> None:
    hints = package_hints()
    assert len(hints) > 80  # the collector sees them (about 90 when this was written)
    wrong = {where: w for where, text in hints if (w := wrong_references(text))}
    assert wrong == {}


def test_the_checker_finds_what_was_wrong() -> None:
    """The hints #31 found misleading, as they were: each one is caught."""
    assert wrong_references("see: python -m toolchain toolchain --help") == ["command toolchain"]
    assert wrong_references("build one with a lower --target (README: Targets)", "install-command")
    assert wrong_references("(docs/plan.md: Nowhere)") == ["docs/plan.md Nowhere"]
    assert wrong_references("(docs/none.md: Targets)") == [
        "file docs/none.md",
        "docs/none.md Targets",
    ]
    assert wrong_references("or --find-links; schemes: http", "publish") == [
        "--find-links of publish"
    ]
    assert wrong_references("fill it with `nox -s fetch-source`") == ["nox session fetch-source"]
    assert wrong_references("`plan --to DIR`") == ["--to of plan"]
    assert wrong_references("see recipes/patches/none.patch") == ["file recipes/patches/none.patch"]
    assert wrong_references("(README: Nowhere)") == ["README Nowhere"]
    assert wrong_references("git -C {} fetch --tags, or pass --git X") == []


def _host_lacking(tmp_path: Path, flag: str) -> Any:
    from toolchain.detect.host import detect_host

    text = (FIXTURES / "cpuinfo" / "x86-haswell.txt").read_text()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(re.sub(rf" {flag}\b", "", text))
    meminfo = FIXTURES / "meminfo" / "buildhost-24g.txt"
    return detect_host(cpuinfo_file=cpuinfo, meminfo_file=meminfo)


def _printed_hint(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) not in (0, 1)
    err = capsys.readouterr().err
    assert "  next: " in err, err
    return err.split("  next: ", 1)[1].strip()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["bogus"], "see: python -m toolchain --help"),
        (["plan", "--bogus"], "see: python -m toolchain plan --help"),
        (["publish", "--upload", "/srv/index"], "upload URL of the index server"),
        (["install-command", "--index", "/srv/index"], "install-command --index-dir DIR"),
        (["verify", "--index", "/srv/index"], "file:///path/"),
        (["matrix", "--vllm", "0.32.0", "--target", "amx"], "leave --target out"),
        (["build-wheel", "--vllm", "0.32.0"], "build for other CPUs with --target"),  # no avx2
        (["detect", "--cpuinfo", str(FIXTURES / "cpuinfo" / "ppc64le-power9.txt")], "x86_64"),
        (["install-command"], "build one for a lower target"),  # no variant runs here
    ],
)
def test_a_hint_as_printed_names_flags_of_the_command_that_printed_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tools: None,
    no_probe: None,
    argv: list[str],
    words: str,
) -> None:
    if argv[0] == "build-wheel":
        host = _host_lacking(tmp_path, "avx2")
        monkeypatch.setattr("toolchain.detect.host.detect_host", lambda **_: host)
    if argv == ["install-command"]:
        (tmp_path / "variants.json").write_text(
            '{"variants": {"amx": {"simple": "amx/simple/", "min_isa": ["no_such_feature"], '
            '"projects": {"vllm": ["1.0"]}}}}'
        )
        argv = [*argv, "--index-dir", str(tmp_path)]
    hint = _printed_hint(capsys, argv)
    assert words in hint
    assert wrong_references(hint, "" if argv[0] == "bogus" else argv[0]) == [], hint
