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
from toolchain.errors import PublishError
from toolchain.publish import wheel_variants
from toolchain.publish.index import publish_index
from toolchain.publish.index_check import validate
from toolchain.publish.install_command import plan_uv_install

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
    files = root / FOLDER / "files"
    v3 = files / f"vcbdemo-1.0+cpu-{X86}-x86_64_v3.whl"
    v4 = files / f"vcbdemo-1.0+cpu-{X86}-x86_64_v4.whl"
    assert v3.is_file() and v4.is_file()
    assert not (files / f"vcbdemo-1.0+cpu-{X86}.whl").exists(), "no portable build: no fallback"
    assert any("no non-variant fallback" in note for note in published.notes)
    metadata = wheel_variants.read_variant_json(v4)
    assert metadata is not None
    assert metadata["$schema"] == wheel_variants.SCHEMA
    assert metadata["variants"] == {"x86_64_v4": {"x86_64": {"level": ["v4"]}}}
    assert metadata["providers"] == {"x86_64": {"requires": ["x86-64-variant-provider"]}}
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
    make_wheel: Callable[..., Path],
    served: Callable[[Path], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    assert Path(uv).is_file(), "uv comes with the test extras (pip install .[test])"
    portable = {"vcbdemo/__init__.py": b"TARGET = 'portable'\n"}  # the fallback, below v3
    make_wheel(per_isa_wheels, "vcbdemo", "1.0+cpu.portable", tag=X86, files=portable)
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
    target = {"v4": "avx512", "v3": "avx2"}.get(level or "", "portable")
    done = subprocess.run(
        [python, "-c", "import vcbdemo; print(vcbdemo.TARGET)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == target, (level, done.stderr, out)
    installed = list((tmp_path / "venv").glob("lib/python*/site-packages/*.dist-info"))
    variant = installed[0] / "variant.json"
    assert variant.is_file() == (level in ("v3", "v4"))


def test_only_a_portable_build_is_a_fallback_and_a_missing_one_is_said(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    folder = tmp_path / "w"
    for target, tag in (("avx2", "cp311"), ("portable", "cp311"), ("avx2", "cp312")):
        make_wheel(folder, "vcbdemo", f"1.0+cpu.{target}", tag=f"{tag}-{tag}-linux_x86_64")
    root = tmp_path / "index"
    published = publish_index(sorted(folder.glob("*.whl")), root, wheel_variants=True)
    assert sorted(_served(root)) == [
        "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64-x86_64_v3.whl",
        "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64.whl",
        "vcbdemo-1.0+cpu-cp312-cp312-linux_x86_64-x86_64_v3.whl",
        "vcbdemo-1.0+cpu-variants.json",
    ], "cp312 has only an avx2 build: a CPU below x86-64-v3 must not get it as the fallback"
    fallback = root / FOLDER / "files" / "vcbdemo-1.0+cpu-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(fallback) as archive:
        assert "vcbdemo-1.0+cpu.dist-info/variant.json" not in archive.namelist()
    assert any(
        "cp312-cp312-linux_x86_64" in note and "no non-variant fallback" in note
        for note in published.notes
    ), published.notes
    assert validate(root.resolve()) == []


def _served(root: Path, project: str = "vcbdemo") -> list[str]:
    page = root / FOLDER / "simple" / project / "index.json"
    return [f["filename"] for f in json.loads(page.read_text())["files"]]


def test_a_variant_copy_never_overwrites_a_published_wheel(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    """Upstream's own `X+cpu` wheel and a lean avx2 build: the fallback copy has upstream's name."""
    folder = tmp_path / "w"
    upstream = make_wheel(folder, "vcbdemo", "1.0+cpu", tag=X86, files={"vcbdemo/up.py": b""})
    make_wheel(folder, "vcbdemo", "1.0+cpu.avx2", tag=X86)
    root = tmp_path / "index"
    publish_index(sorted(folder.glob("*.whl")), root, wheel_variants=True)
    assert validate(root.resolve()) == []
    assert (root / "files" / upstream.name).read_bytes() == upstream.read_bytes()
    again = publish_index(sorted(folder.glob("*.whl")), root, wheel_variants=True)
    assert not again.changed and validate(root.resolve()) == []


def test_two_builds_of_one_level_are_one_file_the_newest_stated(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    folder = tmp_path / "w"
    for version in ("1.0+cpu.avx2", "1.0+cpu.avx2.1", "1.0+cpu.portable"):
        files = {"vcbdemo/__init__.py": f"BUILD = {version!r}\n".encode()}
        make_wheel(folder, "vcbdemo", version, tag=X86, files=files)
    root = tmp_path / "index"
    published = publish_index(sorted(folder.glob("*.whl")), root, wheel_variants=True)
    assert validate(root.resolve()) == []
    served = _served(root)
    assert len(served) == len(set(served)), served
    v3 = f"vcbdemo-1.0+cpu-{X86}-x86_64_v3.whl"
    assert served.count(v3) == 1
    with zipfile.ZipFile(root / FOLDER / "files" / v3) as archive:
        assert archive.read("vcbdemo/__init__.py") == b"BUILD = '1.0+cpu.avx2.1'\n"
    assert any(
        "vcbdemo-1.0+cpu.avx2.1" in note and "newest" in note and "vcbdemo-1.0+cpu.avx2-" in note
        for note in published.notes
    ), published.notes


def test_two_builds_of_one_level_and_one_version_are_refused(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    folder = tmp_path / "w"
    make_wheel(folder, "vcbdemo", "1.0+cpu.avx2", tag=X86)
    other = make_wheel(tmp_path / "o", "vcbdemo", "1.0+cpu.avx2", tag=X86, files={"x.py": b""})
    other.rename(folder / other.name.replace("cpu.avx2", "cpu.AVX2"))  # same version, two files
    with pytest.raises(PublishError, match="both map to x86-64 level v3") as caught:
        publish_index(sorted(folder.glob("*.whl")), tmp_path / "index", wheel_variants=True)
    assert caught.value.exit_code == 12 and not (tmp_path / "index").exists()


def test_uv_without_a_fallback_installs_nothing_below_v3(
    per_isa_wheels: Path, tmp_path: Path
) -> None:
    root = tmp_path / "index"
    publish_index(sorted(per_isa_wheels.glob("*.whl")), root, wheel_variants=True)
    v3_host = dict.fromkeys(wheel_variants.V3, True)
    plan = plan_uv_install(root.as_uri(), v3_host, uv="uv", project="vcbdemo")
    assert plan.chosen.filename == f"vcbdemo-1.0+cpu-{X86}-x86_64_v3.whl"
    avx2_only = {"avx2": True, "f16c": True}  # no FMA: below x86-64-v3
    with pytest.raises(PublishError, match=r"level below v3.*no non-variant fallback"):
        plan_uv_install(root.as_uri(), avx2_only, uv="uv", project="vcbdemo")
