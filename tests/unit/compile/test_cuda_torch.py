"""A CUDA torch configures vLLM's CPU build only where a CUDA toolkit is installed (measured: torch
2.13.0 from PyPI stops cmake with "Your installed Caffe2 version uses CUDA but I cannot find the
CUDA libraries" on a machine without one)."""

from __future__ import annotations

from pathlib import Path

from toolchain.compile.steps import cuda_toolkit


def _nvcc(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return nvcc


def test_no_toolkit_anywhere(tmp_path: Path) -> None:
    assert cuda_toolkit({"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "none")}) is None


def test_cuda_home_or_path_finds_nvcc(tmp_path: Path) -> None:
    nvcc = _nvcc(tmp_path / "cuda")
    assert cuda_toolkit({"PATH": "", "CUDA_HOME": str(tmp_path / "cuda")}) == nvcc
    assert cuda_toolkit({"PATH": f"/nonexistent:{nvcc.parent}"}) == nvcc
