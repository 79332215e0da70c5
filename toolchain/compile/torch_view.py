"""A CUDA-free view of a target torch wheel: what a cross build's cmake needs of torch.

A cross build cannot import the target's torch, and the only aarch64 torch 2.13.0 on PyPI is a CUDA
build whose CMake config asks for CUDA and links libtorch_cuda. The view is a folder holding a
`torch` package with the wheel's headers, its CPU libraries, its CMake config with the CUDA parts
taken out, and two Python files that answer the questions vLLM's cmake asks a Python about torch
(`torch.utils.cmake_prefix_path`, where torch's libgomp lies) with the target's answers. A CPU torch
wheel goes through the same code; it just has nothing CUDA to take out.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import BuildError, DataFileError
from toolchain.util.datafile import load_json
from toolchain.util.files import atomic_path

# The libraries a CPU extension links or that vLLM's cmake looks for (torch's own libgomp).
CPU_LIBRARIES = re.compile(
    r"torch/lib/(libc10|libtorch|libtorch_cpu|libtorch_global_deps|libshm|libgomp[^/]*)\.so[.0-9]*"
)
# What a CUDA build adds to torch's CMake targets: imported targets named so, and the libraries.
CUDA_NAME = re.compile(r"cuda|nvshmem|nvrtc|cudnn|nccl|cupti", re.IGNORECASE)
MARKER = ".vcb-torch-view"

INIT = '''"""The target torch's facts for a cross build's cmake (vllm-cpu-builder's torch view).

Not importable torch: only what vLLM's cmake asks a Python about torch.
"""
__version__ = "{version}"

from . import utils  # noqa: E402  (`import torch; torch.utils.cmake_prefix_path`)
'''
UTILS = """import os

cmake_prefix_path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "share", "cmake")
"""


@dataclass(frozen=True, kw_only=True)
class TorchView:
    torch_dir: Path
    version: str  # torch.__version__ of the wheel (2.13.0+cu130, 2.13.0+cpu)
    cuda: str | None  # torch.version.cuda: the wheel was a CUDA build


def _done(marker: Path) -> dict[str, Any]:
    """What a finished view recorded; empty when there is none or it is not one we wrote (an
    older or killed run's): the view is then made anew, never trusted."""
    try:
        done = load_json(marker)
    except DataFileError:
        return {}
    keys = {"wheel", "version", "cuda"}
    return done if isinstance(done, dict) and keys <= done.keys() else {}


def make_torch_view(wheel: Path, view: Path) -> TorchView:
    """Unpack the view of `wheel` into `view` (reused when done)."""
    torch_dir = view / "torch"
    marker = view / MARKER
    done = _done(marker)
    if done.get("wheel") == wheel.name:
        return TorchView(torch_dir=torch_dir, version=done["version"], cuda=done["cuda"])
    shutil.rmtree(view, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        wanted = [n for n in names if _wanted(n)]
        if "torch/version.py" not in names or not any(
            n.startswith("torch/share/cmake/Torch/") for n in wanted
        ):
            raise BuildError(
                f"{wheel.name} has no torch/version.py or torch/share/cmake/Torch: not a torch "
                "wheel with its CMake config",
                hint="give a torch wheel for the target (--find-links FOLDER)",
            )
        version, cuda = _versions(archive.read("torch/version.py").decode())
        for name in wanted:
            archive.extract(name, view)
    for config in (torch_dir / "share" / "cmake").rglob("*.cmake"):
        config.write_text(cpu_only_cmake(config.name, config.read_text()))
    (torch_dir / "utils").mkdir(exist_ok=True)
    (torch_dir / "__init__.py").write_text(INIT.format(version=version))
    (torch_dir / "utils" / "__init__.py").write_text(UTILS)
    with atomic_path(marker) as temporary:
        temporary.write_text(json.dumps({"wheel": wheel.name, "version": version, "cuda": cuda}))
    return TorchView(torch_dir=torch_dir, version=version, cuda=cuda)


def _wanted(name: str) -> bool:
    if name.endswith("/"):
        return False
    if name.startswith(("torch/include/", "torch/share/cmake/")):
        return not name.startswith("torch/share/cmake/Caffe2/Modules_CUDA_fix/")
    return CPU_LIBRARIES.fullmatch(name) is not None


def _versions(version_py: str) -> tuple[str, str | None]:
    """torch/version.py's `__version__` and `cuda` (None for a CPU build)."""
    version = re.search(r"^__version__\s*=\s*'([^']+)'", version_py, re.MULTILINE)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']+)'", version_py, re.MULTILINE)
    if version is None:
        raise BuildError("torch/version.py of the target torch wheel names no __version__")
    return version.group(1), cuda.group(1) if cuda else None


def cpu_only_cmake(name: str, text: str) -> str:
    """torch's CMake config file `name` without its CUDA parts (a CPU build's text is unchanged)."""
    if name.startswith(("Caffe2Targets", "TensorpipeTargets")):
        return _drop_cuda_targets(text)
    if name.endswith("Config.cmake"):
        return _switch_off_cuda_blocks(text)
    return text


def _switch_off_cuda_blocks(text: str) -> str:
    """`if(1)` / `if(ON)` blocks whose first lines are about CUDA become `if(0)`: the values
    torch's build wrote into its config for USE_CUDA."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if re.fullmatch(r"\s*if\((1|ON)\)\s*", line) and any(
            "cuda" in following.lower() for following in lines[index + 1 : index + 4]
        ):
            lines[index] = line.replace("if(1)", "if(0)").replace("if(ON)", "if(0)")
        elif re.fullmatch(r"\s*if\(1 AND NOT CAFFE2_USE_CUDA\)\s*", line):
            lines[index] = line.replace("if(1 AND", "if(0 AND")
    return "".join(lines)


def _drop_cuda_targets(text: str) -> str:
    """Remove the CUDA imported targets: their paragraphs, and their names from other lists."""
    kept = [p for p in text.split("\n\n") if not TARGET_PARAGRAPH.match(p) or not _names_cuda(p)]
    result = "\n\n".join(kept)
    result = re.sub(r'"([^"\n]*)"', lambda m: '"' + _without_cuda(m.group(1), ";") + '"', result)
    return re.sub(
        r"(foreach\(_cmake_expected_target IN ITEMS )([^)]*)\)",
        lambda m: m.group(1) + _without_cuda(m.group(2), " ") + ")",
        result,
    )


# A paragraph (blank-line separated) that CMake's export writes for one imported target.
TARGET_PARAGRAPH = re.compile(
    r'\s*(# Create imported target |# Import target "|add_library\(|set_target_properties\(|'
    r"set_property\(TARGET |list\(APPEND _cmake_import_check_)"
)


def _names_cuda(paragraph: str) -> bool:
    first = paragraph.strip().splitlines()[0]
    return CUDA_NAME.search(first) is not None


def _without_cuda(items: str, separator: str) -> str:
    """A `;` or space list without CUDA targets and libraries (a path with a CUDA folder too)."""
    if not CUDA_NAME.search(items):
        return items
    return separator.join(item for item in items.split(separator) if not CUDA_NAME.search(item))
