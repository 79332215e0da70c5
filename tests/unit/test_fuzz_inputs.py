"""Every command that reads a file, fed random, truncated and non-UTF-8 bytes: a documented exit
code and one `error:` line, never a traceback (issue #12)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolchain.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DOCUMENTED = set(range(0, 14))
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def damaged(original: bytes) -> st.SearchStrategy[bytes]:
    """Random bytes, or the real file truncated, with a byte replaced, or with bytes inserted."""
    size = max(len(original), 1)
    cut = st.integers(0, size).map(lambda n: original[:n])
    flipped = st.tuples(st.integers(0, size - 1), st.integers(0, 255)).map(
        lambda t: original[: t[0]] + bytes([t[1]]) + original[t[0] + 1 :]
    )
    inserted = st.tuples(st.integers(0, size), st.binary(min_size=1, max_size=8)).map(
        lambda t: original[: t[0]] + t[1] + original[t[0] :]
    )
    return st.one_of(st.binary(max_size=512), cut, flipped, inserted)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(argv)  # any exception other than the toolkit's own escapes and fails the test
    out, err = capsys.readouterr()
    assert code in DOCUMENTED, (code, err)
    assert "Traceback" not in out + err
    if code not in (0, 1):
        assert err.startswith("error: "), err


@pytest.fixture
def tools(fake_programs) -> None:
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")


def _fuzz_file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


CPUINFO = (FIXTURES / "cpuinfo" / "x86-zen4.txt").read_bytes()
MEMINFO = (FIXTURES / "meminfo" / "buildhost-24g.txt").read_bytes()
RECIPE = (ROOT / "recipes" / "vllm-0.32.0.toml").read_bytes()
VARIANTS = (
    b'{"variants": {"avx2": {"simple": "avx2/simple/", "min_isa": ["avx2"], '
    b'"projects": {"vllm": ["1.0"]}}}}'
)


@FUZZ
@given(data=damaged(CPUINFO))
def test_detect_cpuinfo(tmp_path: Path, tools: None, capsys, data: bytes) -> None:
    _run(["detect", "--cpuinfo", str(_fuzz_file(tmp_path, "cpuinfo", data))], capsys)


@FUZZ
@given(data=damaged(MEMINFO))
def test_plan_meminfo(tmp_path: Path, tools: None, capsys, data: bytes) -> None:
    meminfo = _fuzz_file(tmp_path, "meminfo", data)
    cpuinfo = FIXTURES / "cpuinfo" / "x86-zen4.txt"
    _run(["plan", "--cpuinfo", str(cpuinfo), "--meminfo", str(meminfo)], capsys)


@FUZZ
@given(data=damaged(RECIPE))
def test_plan_recipe(tmp_path: Path, tools: None, capsys, data: bytes) -> None:
    recipes = tmp_path / "recipes"
    if not recipes.is_dir():
        shutil.copytree(ROOT / "recipes", recipes)
    (recipes / "vllm-0.32.0.toml").write_bytes(data)
    cpuinfo = FIXTURES / "cpuinfo" / "x86-zen4.txt"
    argv = ["plan", "--vllm", "0.32.0", "--recipes", str(recipes), "--cpuinfo", str(cpuinfo)]
    _run([*argv, "--meminfo", str(FIXTURES / "meminfo" / "buildhost-24g.txt")], capsys)


@FUZZ
@given(data=damaged(b'[tool.vllm-cpu-builder]\njobs = 2\nwork-dir = "/tmp/w"\n'))
def test_settings_file(
    tmp_path: Path, tools: None, capsys, monkeypatch: pytest.MonkeyPatch, data: bytes
) -> None:
    _fuzz_file(tmp_path, "pyproject.toml", data)
    monkeypatch.chdir(tmp_path)
    cpuinfo = FIXTURES / "cpuinfo" / "x86-zen4.txt"
    _run(
        [
            "plan",
            "--cpuinfo",
            str(cpuinfo),
            "--meminfo",
            str(FIXTURES / "meminfo" / "buildhost-24g.txt"),
        ],
        capsys,
    )


@FUZZ
@given(data=damaged(b"from vllm import LLM\nif __name__ == '__main__':\n    LLM('m')\n"))
def test_lint_script(tmp_path: Path, capsys, data: bytes) -> None:
    _run(["lint-script", str(_fuzz_file(tmp_path, "run.py", data))], capsys)


@FUZZ
@given(data=st.binary(max_size=600))
def test_publish_a_damaged_wheel(
    tmp_path: Path, capsys, make_wheel: Callable[..., Path], data: bytes
) -> None:
    wheels = tmp_path / "wheels"
    good = make_wheel(wheels, "vcbdemo", "1.0+cpu.avx2")
    original = good.read_bytes()
    (wheels / "vcbdemo-1.1+cpu.avx2-py3-none-any.whl").write_bytes(original[: len(data)] + data)
    _run(["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "index")], capsys)


@FUZZ
@given(data=damaged(VARIANTS))
def test_install_command_variants_json(
    tmp_path: Path, capsys, tools: None, no_probe: None, data: bytes
) -> None:
    index = tmp_path / "index"
    index.mkdir(exist_ok=True)
    (index / "variants.json").write_bytes(data)
    _run(["install-command", "--index-dir", str(index)], capsys)
