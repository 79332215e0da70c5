"""Wheel variants (PEP 825/850 drafts): which builds become variants, the files and metadata
publish writes, and uv (from PyPI) installing the variant this CPU's x86-64 level calls for."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.publish import wheel_variants
from toolchain.publish.index import publish_index
from toolchain.publish.index_check import validate

X86 = "py3-none-linux_x86_64"
FOLDER = wheel_variants.FOLDER


@pytest.mark.parametrize(
    ("min_isa", "level"),
    [
        (["avx2"], "v3"),
        (["avx2", "f16c"], "v3"),
        (["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq"], "v4"),
        (["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"], None),
        (["avx2", "amx_bf16"], None),
    ],
)
def test_only_a_build_a_whole_level_runs_becomes_a_variant(
    min_isa: list[str], level: str | None
) -> None:
    assert wheel_variants.level_of(min_isa) == level


@pytest.fixture
def per_isa_wheels(tmp_path: Path, make_wheel: Callable[..., Path]) -> Path:
    """Pre-0.17 style: one wheel per ISA, told apart by their +cpu.TARGET labels."""
    folder = tmp_path / "wheels"
    for target in ("avx2", "avx512", "avx512bf16"):
        make_wheel(
            folder,
            "vcbdemo",
            f"1.0+cpu.{target}",
            tag=X86,
            files={"vcbdemo/__init__.py": f"TARGET = {target!r}\n".encode()},
        )
    return folder


def test_publish_writes_variant_wheels_a_fallback_and_the_variants_json(
    per_isa_wheels: Path, tmp_path: Path
) -> None:
    root = tmp_path / "index"
    published = publish_index(sorted(per_isa_wheels.glob("*.whl")), root, wheel_variants=True)
    assert validate(root.resolve()) == []
    files = root / "files"
    v3 = files / f"vcbdemo-1.0+cpu-{X86}-x86_64_v3.whl"
    v4 = files / f"vcbdemo-1.0+cpu-{X86}-x86_64_v4.whl"
    fallback = files / f"vcbdemo-1.0+cpu-{X86}.whl"
    assert v3.is_file() and v4.is_file() and fallback.is_file()
    metadata = wheel_variants.read_variant_json(v4)
    assert metadata is not None
    assert metadata["$schema"] == wheel_variants.SCHEMA
    assert metadata["variants"] == {"x86_64_v4": {"x86_64": {"level": ["v4"]}}}
    assert metadata["providers"] == {"x86_64": {"requires": ["x86-64-variant-provider"]}}
    assert wheel_variants.read_variant_json(fallback) is None
    with zipfile.ZipFile(v3) as archive:
        names = archive.namelist()
        assert "vcbdemo-1.0+cpu.dist-info/variant.json" in names
        assert b"Version: 1.0+cpu\n" in archive.read("vcbdemo-1.0+cpu.dist-info/METADATA")
        assert archive.read("vcbdemo/__init__.py") == b"TARGET = 'avx2'\n"
    index_json = json.loads((files / "vcbdemo-1.0+cpu-variants.json").read_text())
    assert set(index_json["variants"]) == {"x86_64_v3", "x86_64_v4"}
    page = (root / FOLDER / "simple" / "vcbdemo" / "index.html").read_text()
    assert "vcbdemo-1.0+cpu-variants.json" in page and "avx512bf16" not in page
    assert any("avx512bf16" in note and "per-ISA index only" in note for note in published.notes)
    assert (root / "avx512bf16" / "simple" / "vcbdemo").is_dir(), "per-ISA indexes stay"


def test_a_portable_only_release_has_nothing_to_choose(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    wheel = make_wheel(tmp_path / "w", "vcbdemo", "2.0+cpu.portable", tag=X86)
    published = publish_index([wheel], tmp_path / "index", wheel_variants=True)
    assert published.notes == ("vcbdemo 2.0: no build maps to an x86-64 level: no variants",)
    assert validate((tmp_path / "index").resolve()) == []


@pytest.mark.integration
@pytest.mark.skipif(detect_host().arch != "x86_64", reason="x86-64 level variants; not x86_64")
def test_uv_installs_the_variant_of_this_cpu_s_level(
    per_isa_wheels: Path,
    tmp_path: Path,
    served: Callable[[Path], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    assert Path(uv).is_file(), "uv comes with the test extras (pip install .[test])"
    index = tmp_path / "public" / "index"
    argv = ["--wheel-dir", str(per_isa_wheels), "--index-dir", str(index)]
    assert main(["publish", *argv, "--wheel-variants"]) == 0
    assert f"{FOLDER}/simple/: vcbdemo-1.0+cpu-variants.json" in capsys.readouterr().out
    url = served(index.parent) + "index/"
    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    install = ["install-command", "--index", url, "--package", "vcbdemo", "--python", str(python)]
    install += ["--installer", "uv", "--run", "--work-dir", str(tmp_path / "work")]
    assert main(install) == 0
    out = capsys.readouterr().out
    assert "--preview-features wheel-variants" in out
    level = wheel_variants.host_level(detect_host().isa)
    # uv decides; the same rule in the toolkit says which it must have taken on this CPU
    target = {"v4": "avx512", "v3": "avx2"}.get(level or "", "avx2")
    done = subprocess.run(
        [python, "-c", "import vcbdemo; print(vcbdemo.TARGET)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == target, (level, done.stderr, out)
    installed = list((tmp_path / "venv").glob("lib/python*/site-packages/*.dist-info"))
    variant = installed[0] / "variant.json"
    assert variant.is_file() == (level in ("v3", "v4"))


def test_each_python_gets_its_own_fallback(tmp_path: Path, make_wheel: Callable[..., Path]) -> None:
    folder = tmp_path / "w"
    for target, tag in (("avx2", "cp311"), ("avx2", "cp312"), ("avx512", "cp311")):
        make_wheel(folder, "vcbdemo", f"1.0+cpu.{target}", tag=f"{tag}-{tag}-linux_x86_64")
    publish_index(sorted(folder.glob("*.whl")), tmp_path / "index", wheel_variants=True)
    files = sorted(p.name for p in (tmp_path / "index" / "files").glob("vcbdemo-1.0+cpu-*.whl"))
    assert files == [
        "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64-x86_64_v3.whl",
        "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64-x86_64_v4.whl",
        "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64.whl",
        "vcbdemo-1.0+cpu-cp312-cp312-linux_x86_64-x86_64_v3.whl",
        "vcbdemo-1.0+cpu-cp312-cp312-linux_x86_64.whl",
    ]
    assert validate((tmp_path / "index").resolve()) == []
