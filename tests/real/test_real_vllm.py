"""The real thing, run by hand: build vLLM 0.32.0, install it in a fresh venv, load its kernels,
and generate text with a tiny local model. Never part of the default run (`-m "not vllm"`).

    VCB_SOURCES=~/vllm-sources nox -s tests -- -m vllm -n 0 -s

A cold build takes about an hour on 2 cores; with a warm compile cache, minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.runtime_deps import runtime_requirements
from toolchain.wheelfile import read_manifest

SCRIPTS = Path(__file__).resolve().parents[2] / "toolchain" / "verify" / "scripts"


@pytest.mark.vllm
def test_vllm_0_32_builds_loads_its_kernels_and_generates(tmp_path: Path) -> None:
    if not os.environ.get("VCB_SOURCES"):
        pytest.fail("set VCB_SOURCES to the source mirror (see docs/build.md: `fetch-sources`)")
    wheel_dir = tmp_path / "wheels"
    assert main(["build-wheel", "--vllm", "0.32.0", "--wheel-dir", str(wheel_dir)]) == 0
    (wheel,) = wheel_dir.glob("vllm-0.32.0+cpu.portable-*.whl")
    manifest = read_manifest(wheel)
    assert manifest is not None and manifest["patches"], "the recipe patch is in the manifest"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    deps = runtime_requirements(wheel)
    subprocess.run([python, "-m", "pip", "install", "-q", *deps.install], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)

    run_dir = tmp_path / "run"  # a folder with no vllm/ in it
    run_dir.mkdir()
    kernels = subprocess.run(
        [sys.executable, "-m", "toolchain", "check-kernels", "--python", str(python)],
        capture_output=True,
        text=True,
        cwd=run_dir,
    )
    assert kernels.returncode == 0, kernels.stdout + kernels.stderr
    assert "_C_AVX2.abi3.so: loads" in kernels.stdout

    model = tmp_path / "tiny-model"
    subprocess.run([python, SCRIPTS / "make_tiny_model.py", model], check=True, cwd=run_dir)
    done = subprocess.run(
        [python, SCRIPTS / "generate_check.py", model, "--prompts", "4"],
        capture_output=True,
        text=True,
        cwd=run_dir,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    report = json.loads(line.removeprefix("RESULT "))
    print(f"generate: {report}")
    assert [run["generated_tokens"] for run in report["runs"]] == [4 * 16]
    assert report["vllm_version"] == "0.32.0+cpu.portable"
