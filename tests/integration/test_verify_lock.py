"""Two verifies of one work folder at once: the second refuses (exit 13) instead of deleting the
venv the first is installing into, and the first finishes its install."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _verify(wheel: Path, work: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolchain", "verify", str(wheel), "--work-dir", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=wheel.parent,
        env={**os.environ, "PIP_NO_INDEX": "1"},  # the wheel needs only pip, which venvs have
    )  # fmt: skip


def _wait_for_lock(lock: Path, first: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not (lock.is_file() and lock.read_text().strip() == f"pid {first.pid}"):
        assert first.poll() is None, f"the first verify ended early: {first.communicate()[0]}"
        assert time.monotonic() < deadline, "the first verify never took the lock"
        time.sleep(0.05)


def test_a_second_verify_of_the_same_work_folder_refuses_and_leaves_the_first_alone(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    # no torch, so verify stops after the install with exit 11: the install is what it shares
    wheel = make_wheel(tmp_path / "wheels", "vcbdemo", "1.0", requires=("pip",))
    work = tmp_path / "work"
    first = _verify(wheel, work)
    try:
        _wait_for_lock(work / "verify" / ".verify.lock", first)
        second = subprocess.run(
            [sys.executable, "-m", "toolchain", "verify", str(wheel), "--work-dir", str(work)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        first_out = first.communicate(timeout=600)[0]
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 13, second.stdout + second.stderr
    assert f"another verify is running in {work / 'verify'} (pid {first.pid})" in second.stderr
    assert "use another --work-dir" in second.stderr
    assert "installed in" in first_out, first_out
    assert "No module named 'torch'" in first_out, first_out  # past the install, as expected
    assert (work / "verify" / "venv" / "lib").is_dir(), "the first verify's venv is still there"
