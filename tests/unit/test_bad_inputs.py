"""Bad input gets the documented exit code and a message naming the file, key or flag (#12)."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import SourceError
from toolchain.util.files import tar_sha256, unpack_tar

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
ZEN4 = str(FIXTURES / "cpuinfo" / "x86-zen4.txt")
MEMINFO = str(FIXTURES / "meminfo" / "buildhost-24g.txt")
PLAN = ["plan", "--cpuinfo", ZEN4, "--meminfo", MEMINFO]


@pytest.fixture
def tools(fake_programs) -> None:
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")


def _fails(argv: list[str], code: int, words: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[tool.vllm-cpu-builder]\njobs = true\n", "jobs must be a int, not bool True"),
        ("[tool.vllm-cpu-builder]\njobs = 2.9\n", "jobs must be a int, not float 2.9"),
        ('[tool.vllm-cpu-builder]\nwork-dir = ["a"]\n', "work-dir must be a str, not list"),
        ("[tool.vllm-cpu-builder]\nallow-cuda-torch = 1\n", "allow-cuda-torch must be a bool"),
        ("[tool.vllm-cpu-builder]\nmax-jobs = 2\n", "unknown keys ['max-jobs']"),
        ('[tool]\nvllm-cpu-builder = "x"\n', "must be a table"),
        ('tool = "x"\n', "[tool] must be a table"),
        (b"[tool.vllm-cpu-builder]\nvllm = '\xff'\n", "not UTF-8 text"),
    ],
)
def test_settings_in_pyproject_are_strict(
    text: str | bytes, words: str, tmp_path: Path, tools: None, capsys, monkeypatch
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.chdir(tmp_path)
    err = _fails(PLAN, 4, words, capsys)
    assert "pyproject.toml" in err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("", 'tar_sha265 = "x"\n'), "unknown keys ['tar_sha265']"),
        (("memory_per_job_mib = 3830", "memory_per_job_mib = true"), "memory_per_job_mib"),
        (('git_tag = "v0.32.0"', "git_tag = 32"), "key 'git_tag' must be a non-empty string"),
        (
            ('gxx_min = { x86_64 = "12.3" }', 'gxx_min = { x86_64 = "twelve" }'),
            "'twelve' is not a version",
        ),
    ],
)
def test_recipes_are_strict(
    change: tuple[str, str], words: str, tmp_path: Path, tools: None, capsys
) -> None:
    recipes = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", recipes)
    path = recipes / "vllm-0.32.0.toml"
    old, new = change
    text = path.read_text()
    text = text.replace(old, new) if old else text.replace("[source]\n", f"[source]\n{new}")
    path.write_text(text)
    err = _fails([*PLAN, "--vllm", "0.32.0", "--recipes", str(recipes)], 4, words, capsys)
    assert "vllm-0.32.0.toml" in err


def test_a_stray_recipe_file_is_named(tmp_path: Path, tools: None, capsys) -> None:
    recipes = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", recipes)
    shutil.copy(recipes / "vllm-0.32.0.toml", recipes / "vllm-latest.toml")
    _fails([*PLAN, "--recipes", str(recipes)], 4, "vllm-latest.toml: its name: 'latest'", capsys)


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        (["--reserve-mib", "-1"], 2, "--reserve-mib must be 0 or more"),
        (["--vllm", ""], 2, "--vllm is empty"),
        (["--cxx", "/nonexistent/g++"], 5, "/nonexistent/g++, which is not an executable"),
        (["--index-url", "pypi.internal/simple"], 2, "--index-url takes a URL"),
        (["--torch-index", "download.pytorch.org"], 2, "--torch-index takes a URL"),
    ],
)
def test_bad_flags_are_refused(
    extra: list[str], code: int, words: str, tools: None, capsys
) -> None:
    _fails([*PLAN, *extra], code, words, capsys)


def test_saved_machine_files_that_are_not_what_they_claim(tmp_path: Path, capsys) -> None:
    no_flags = tmp_path / "cpuinfo"
    no_flags.write_text("processor : 0\nvendor_id : GenuineIntel\nmodel name : x\n")
    _fails(["detect", "--cpuinfo", str(no_flags)], 4, "not a /proc/cpuinfo dump", capsys)
    _fails(["detect", "--cpuinfo", str(tmp_path)], 2, "a folder, not a file", capsys)
    for text, field in [("", "MemTotal"), ("MemTotal: -5 kB\n", "MemTotal"),
                        ("MemTotal: 100 kB\nMemFree: 5 kB\n", "MemAvailable")]:  # fmt: skip
        meminfo = tmp_path / "meminfo"
        meminfo.write_text(text)
        argv = ["detect", "--cpuinfo", ZEN4, "--meminfo", str(meminfo)]
        err = _fails(argv, 4, f"no positive {field} line", capsys)
        assert str(meminfo) in err


def test_a_corrupt_mirror_archive_is_a_source_error_naming_it(tmp_path: Path) -> None:
    archive = tmp_path / "oneDNN-3.13.tar.gz"
    archive.write_bytes(gzip.compress(b"not a tar at all" * 100)[:40])  # truncated
    with pytest.raises(SourceError, match=r"oneDNN-3\.13\.tar\.gz cannot be read as an archive"):
        tar_sha256(archive)
    with pytest.raises(SourceError) as caught:
        unpack_tar(archive, tmp_path / "out", stamp="x")
    assert caught.value.exit_code == 8 and not (tmp_path / "out").exists()


def test_install_command_names_the_python_tag_and_a_missing_index(
    tmp_path: Path, capsys, make_wheel: Callable[..., Path], tools: None, no_probe: None
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", tag="cp399-cp399-linux_x86_64")
    index = tmp_path / "index"
    assert main(["publish", "--wheel-dir", str(wheels), "--index-dir", str(index)]) == 0
    capsys.readouterr()
    argv = ["install-command", "--index-dir", str(index), "--package", "vcbdemo"]
    _fails(argv, 12, "the Python tags do not match, whatever the CPU", capsys)
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails(["install-command", "--index-dir", str(empty)], 2, "no index written by publish", capsys)
    argv = ["install-command", "--index-dir", str(index), "--python", "/nonexistent/python"]
    _fails(argv, 2, "--python /nonexistent/python: no such file", capsys)


def test_verify_refuses_a_broken_wheel_before_touching_its_venv(
    tmp_path: Path, capsys, tools: None
) -> None:
    venv = tmp_path / "work" / "verify" / "venv"
    venv.mkdir(parents=True)
    (venv / "kept").write_text("")
    broken = tmp_path / "vllm-0.32.0+cpu-cp311-cp311-linux_x86_64.whl"
    broken.write_bytes(b"not a zip")
    argv = ["verify", str(broken), "--work-dir", str(tmp_path / "work")]
    _fails(argv, 4, "not a readable wheel", capsys)
    badly_named = tmp_path / "vllm.whl"
    badly_named.write_bytes(b"")
    _fails(
        ["verify", str(badly_named), "--work-dir", str(tmp_path / "work")],
        4,
        "not a wheel file name",
        capsys,
    )
    _fails(["verify", "--python", "/nonexistent/python"], 2, "no such file", capsys)
    assert (venv / "kept").is_file()
