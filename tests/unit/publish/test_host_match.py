"""install-command prefers the build that suits the CPU, by the targets' needs (issue #33)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.tags import parse_tag

from toolchain.publish.host_match import PythonFacts
from toolchain.publish.index import publish_index
from toolchain.publish.install_command import plan_install

X86 = "py3-none-linux_x86_64"
AVX2 = ["avx2", "f16c", "fma"]
AVX512 = [*AVX2, "avx512f", "avx512bw", "avx512vl", "avx512dq"]
ZEN4 = [*AVX512, "avx512_bf16", "avx512_vnni"]
ARM = "py3-none-linux_aarch64"
NEOVERSE_N1 = ["asimd", "fp16", "dotprod"]
NEOVERSE_V1 = [*NEOVERSE_N1, "bf16", "i8mm"]


@pytest.mark.parametrize(
    ("tag", "targets", "host", "chosen"),
    [
        # same needs, same tier loaded: the lean build, whatever the names' order
        (X86, ("portable", "avx2"), AVX2, "avx2"),
        # portable would load _C_AVX512 here, the avx2 build only _C_AVX2
        (X86, ("portable", "avx2"), AVX512, "portable"),
        (X86, ("portable", "avx2", "avx512"), AVX512, "avx512"),
        (X86, ("portable", "avx512"), AVX2, "portable"),  # the only one this CPU runs
        (X86, ("portable", "avx2", "avx512", "avx512bf16"), ZEN4, "avx512bf16"),
        # Arm (0.32's portable, issue #29): it loads _C_ARM_BF16I8MM on a BF16 + I8MM CPU
        (ARM, ("portable", "bf16i8mm"), NEOVERSE_V1, "bf16i8mm"),
        (ARM, ("portable", "neon"), NEOVERSE_V1, "portable"),
        (ARM, ("portable", "bf16i8mm"), NEOVERSE_N1, "portable"),  # the only one it runs
        (ARM, ("portable", "neon", "bf16i8mm"), NEOVERSE_N1, "neon"),
    ],
)
@pytest.mark.parametrize("published", [True, False], ids=["variants-root", "flat-index"])
def test_the_most_specific_build_the_cpu_runs_is_chosen(
    tmp_path: Path,
    make_wheel: Callable[..., Path],
    tag: str,
    targets: tuple[str, ...],
    host: list[str],
    chosen: str,
    published: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if tag == ARM:  # an aarch64 Python takes the Arm wheels
        monkeypatch.setattr(
            "toolchain.publish.install_command.python_facts",
            lambda python: PythonFacts(
                python=python,
                tags=frozenset(parse_tag(tag)),
                markers={"platform_machine": "aarch64", "python_version": "3.11"},
            ),
        )
    folder = tmp_path / "wheels"
    for target in targets:
        make_wheel(folder, "vcbdemo", f"0.32.0+cpu.{target}", tag=tag)
    if published:
        publish_index(sorted(folder.glob("*.whl")), tmp_path / "index")
        index = (tmp_path / "index").as_uri()
    else:  # a flat folder: needs from each label's target in its era (pypiserver, devpi)
        index = _flat_index(folder)
    plan = plan_install(index, dict.fromkeys(host, True), project="vcbdemo")
    assert plan.chosen.filename == f"vcbdemo-0.32.0+cpu.{chosen}-{tag}.whl"


def _flat_index(folder: Path) -> str:
    """A PEP 503 page per project for the wheels in `folder`, as a file:// simple index."""
    page = folder.parent / "simple" / "vcbdemo" / "index.html"
    page.parent.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in sorted(folder.glob("*.whl")))
    page.write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return (folder.parent / "simple").as_uri() + "/"
