"""A release's oneDNN callers: a prune list learned from one release holds for another only when
the code that reaches oneDNN, and cmake's oneDNN set-up, are the same."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from toolchain.errors import SourceError
from toolchain.plan.onednn_callers import callers, callers_digest, sdist_callers, tree_callers

HELPER_H = '#pragma once\n#include "oneapi/dnnl/dnnl.hpp"\ninline void mm() { dnnl::engine e; }\n'
FILES = {
    "csrc/cpu/dnnl_helper.h": HELPER_H,
    "csrc/cpu/dnnl_helper.cpp": '#include "dnnl_helper.h"\nvoid f() {}\n',
    "csrc/cpu/dnnl_kernels.cpp": '#include "cpu/dnnl_helper.h"\nvoid g() { mm(); }\n',
    "csrc/cpu/activation.cpp": '#include "cpu_types.hpp"\nvoid silu() {}\n',
    "csrc/cpu/torch_bindings.cpp": "void release_dnnl_matmul_handler(int64_t handler);\n",
    "cmake/cpu_extension.cmake": 'set(ONEDNN_ENABLE_PRIMITIVE "MATMUL;REORDER")\nset(X 1)\n',
    "setup.py": "import dnnl  # outside csrc/: not vLLM's kernels\n",
}


def test_callers_are_the_sources_that_reach_onednn_directly_or_through_an_include() -> None:
    assert callers(FILES) == [
        "csrc/cpu/dnnl_helper.cpp",
        "csrc/cpu/dnnl_helper.h",
        "csrc/cpu/dnnl_kernels.cpp",
    ]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("csrc/cpu/dnnl_kernels.cpp", '#include "cpu/dnnl_helper.h"\nvoid g() { mm(); mm(); }\n'),
        ("csrc/cpu/dnnl_helper.h", HELPER_H + "inline void more() { dnnl::stream s; }\n"),
        ("cmake/cpu_extension.cmake", 'set(ONEDNN_ENABLE_PRIMITIVE "MATMUL")\nset(X 1)\n'),
        ("csrc/cpu/new_gemm.cpp", '#include "dnnl_helper.h"\n'),  # a new caller
    ],
)
def test_a_change_that_can_change_what_links_changes_the_digest(path: str, text: str) -> None:
    assert callers_digest({**FILES, path: text}) != callers_digest(FILES)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("csrc/cpu/activation.cpp", "void silu() { /* faster */ }\n"),
        ("csrc/cpu/torch_bindings.cpp", "void release_dnnl_matmul_handler(int64_t h);\n// x\n"),
        ("cmake/cpu_extension.cmake", 'set(ONEDNN_ENABLE_PRIMITIVE "MATMUL;REORDER")\nset(X 2)\n'),
        ("setup.py", "changed = True\n"),
    ],
)
def test_a_change_elsewhere_keeps_the_digest(path: str, text: str) -> None:
    digest = callers_digest(FILES)
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert callers_digest({**FILES, path: text}) == digest


def _sdist(path: Path, top: str, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_and_its_unpacked_tree_give_the_callers_and_the_same_digest(
    tmp_path: Path,
) -> None:
    sdist = _sdist(tmp_path / "vllm-0.40.0.tar.gz", "vllm-0.40.0", FILES)
    read = sdist_callers(sdist)
    assert sorted(read) == sorted([*callers(FILES), "cmake/cpu_extension.cmake"])
    tree = tmp_path / "tree"
    for name, text in FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    assert tree_callers(tree) == read
    assert callers_digest(read) == callers_digest(FILES)


def test_a_broken_sdist_is_a_source_error(tmp_path: Path) -> None:
    broken = tmp_path / "vllm-0.40.0.tar.gz"
    broken.write_bytes(b"not a tar")
    with pytest.raises(SourceError, match="is not a readable sdist"):
        sdist_callers(broken)


def test_an_sdist_whose_members_start_with_dot_slash_gives_the_same_digest(
    tmp_path: Path,
) -> None:
    plain = sdist_callers(_sdist(tmp_path / "a.tar.gz", "vllm-0.40.0", FILES))
    dotted = sdist_callers(_sdist(tmp_path / "b.tar.gz", "./vllm-0.40.0", FILES))
    assert dotted == plain
    assert callers_digest(dotted) == callers_digest(FILES)
