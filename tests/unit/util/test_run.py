"""The subprocess helper: what it says when a program is missing or fails."""

from __future__ import annotations

import pytest

from toolchain.errors import ProcessFailedError, ToolMissingError
from toolchain.util.run import capture, resolve


def test_missing_program_names_how_to_get_it(fake_programs) -> None:
    with pytest.raises(ToolMissingError) as caught:
        resolve("patchelf")
    assert "patchelf was not found on PATH" in caught.value.message
    assert "apt-get install patchelf" in caught.value.hint


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
