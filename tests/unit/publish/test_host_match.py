"""install-command prefers the build that suits the CPU, by the targets' needs (issue #33)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.publish.index import publish_index
from toolchain.publish.install_command import plan_install

X86 = "py3-none-linux_x86_64"
AVX2 = ["avx2", "f16c", "fma"]
AVX512 = [*AVX2, "avx512f", "avx512bw", "avx512vl", "avx512dq"]
ZEN4 = [*AVX512, "avx512_bf16", "avx512_vnni"]


@pytest.mark.parametrize(
    ("targets", "host", "chosen"),
    [
        # same needs, same tier loaded: the lean build, whatever the names' order
        (("portable", "avx2"), AVX2, "avx2"),
        # portable would load _C_AVX512 here, the avx2 build only _C_AVX2
        (("portable", "avx2"), AVX512, "portable"),
        (("portable", "avx2", "avx512"), AVX512, "avx512"),
        (("portable", "avx512"), AVX2, "portable"),  # the only one this CPU runs
        (("portable", "avx2", "avx512", "avx512bf16"), ZEN4, "avx512bf16"),
    ],
)
@pytest.mark.parametrize("published", [True, False], ids=["variants-root", "flat-index"])
def test_the_most_specific_build_the_cpu_runs_is_chosen(
    tmp_path: Path,
    make_wheel: Callable[..., Path],
    targets: tuple[str, ...],
    host: list[str],
    chosen: str,
    published: bool,
) -> None:
    folder = tmp_path / "wheels"
    for target in targets:
        make_wheel(folder, "vcbdemo", f"0.32.0+cpu.{target}", tag=X86)
    if published:
        publish_index(sorted(folder.glob("*.whl")), tmp_path / "index")
        index = (tmp_path / "index").as_uri()
    else:  # a flat folder: needs from each label's target in its era (pypiserver, devpi)
        index = _flat_index(folder)
    plan = plan_install(index, dict.fromkeys(host, True), project="vcbdemo")
    assert plan.chosen.filename == f"vcbdemo-0.32.0+cpu.{chosen}-{X86}.whl"


def _flat_index(folder: Path) -> str:
    """A PEP 503 page per project for the wheels in `folder`, as a file:// simple index."""
    page = folder.parent / "simple" / "vcbdemo" / "index.html"
    page.parent.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in sorted(folder.glob("*.whl")))
    page.write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return (folder.parent / "simple").as_uri() + "/"
