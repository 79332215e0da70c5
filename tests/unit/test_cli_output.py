"""The command line's own edges (#31): a reader that goes away, nested JSON, the hints it gives."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import READER_GONE, main
from toolchain.errors import DataFileError, KernelCheckError
from toolchain.util.datafile import parse_json
from toolchain.util.simple_api import parse_project_page
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
    with pytest.raises(DataFileError, match=f"{page}: arrays or objects nested"):
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
    assert engine_checks._marked("RESULT " + DEEP, "RESULT ") == {}


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
