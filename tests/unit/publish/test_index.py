"""The static per-variant index: valid PEP 503/691 pages, atomic and idempotent regeneration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import PublishError
from toolchain.publish.index import publish_index
from toolchain.publish.index_check import validate
from toolchain.publish.install_command import plan_install

AVX512_HOST = dict.fromkeys(["avx2", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"], True)


@pytest.fixture
def wheels(tmp_path: Path, make_wheel: Callable[..., Path]) -> Path:
    """Two variants of one release and a portable build of another, as build-wheel names them."""
    folder = tmp_path / "wheels"
    for version in ("1.0+cpu.avx2", "1.0+cpu.avx512", "0.9+cpu.portable"):
        make_wheel(folder, "vcbdemo", version, requires_python=">=3.9", requires=("packaging",))
    return folder


def test_each_variant_gets_its_own_valid_index(wheels: Path, tmp_path: Path) -> None:
    root = tmp_path / "index"
    published = publish_index(sorted(wheels.glob("*.whl")), root)
    assert validate(root) == []
    variants = json.loads((root / "variants.json").read_text())["variants"]
    assert sorted(variants) == ["avx2", "avx512", "portable"]
    assert variants["avx512"]["min_isa"] == [
        "avx2",
        "avx512bw",
        "avx512dq",
        "avx512f",
        "avx512vl",
        "f16c",
    ]
    page = (root / "avx2" / "simple" / "vcbdemo" / "index.html").read_text()
    assert "vcbdemo-1.0+cpu.avx2-py3-none-any.whl</a>" in page
    assert "avx512" not in page, "a variant's index holds only that variant"
    assert 'data-requires-python="&gt;=3.9"' in page
    assert 'href="../../../files/vcbdemo-1.0%2Bcpu.avx2-py3-none-any.whl#sha256=' in page
    data = json.loads((root / "avx2" / "simple" / "vcbdemo" / "index.json").read_text())
    assert data["meta"] == {"api-version": "1.1"} and data["versions"] == ["1.0+cpu.avx2"]
    assert data["files"][0]["core-metadata"] == data["files"][0]["dist-info-metadata"]
    assert root.is_symlink() and published.changed


def test_regeneration_is_idempotent_and_swaps_whole_generations(
    wheels: Path, tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    root = tmp_path / "index"
    first = publish_index(sorted(wheels.glob("*.whl")), root)
    again = publish_index(sorted(wheels.glob("*.whl")), root)
    assert not again.changed and again.generation == first.generation
    make_wheel(wheels, "vcbdemo", "1.1+cpu.avx2")
    second = publish_index(sorted(wheels.glob("*.whl")), root)
    assert second.changed and root.resolve() == second.generation
    assert first.generation.is_dir(), "the previous generation stays for readers inside it"
    make_wheel(wheels, "vcbdemo", "1.2+cpu.avx2")
    publish_index(sorted(wheels.glob("*.whl")), root)
    assert not first.generation.exists(), "older generations are removed"
    leftovers = [p.name for p in root.parent.iterdir() if p.name.endswith((".part", ".link"))]
    assert leftovers == []


def test_a_reader_never_sees_half_an_index(wheels: Path, tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "index"
    before = publish_index(sorted(wheels.glob("*.whl")), root)

    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("toolchain.publish.index._write_pair", broken)
    (wheels / "vcbdemo-0.9+cpu.portable-py3-none-any.whl").unlink()
    with pytest.raises(PublishError, match=r"could not write the index \(disk full\); nothing"):
        publish_index(sorted(wheels.glob("*.whl")), root)
    assert root.resolve() == before.generation and validate(root) == []
    assert not any(p.name.endswith(".part") for p in before.generation.parent.iterdir())


def test_wheels_without_a_cpu_label_and_foreign_folders_are_refused(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    plain = make_wheel(tmp_path / "w", "vllm", "0.32.0")
    with pytest.raises(PublishError, match="has no '\\+cpu' label"):
        publish_index([plain], tmp_path / "index")
    folder = tmp_path / "existing"
    folder.mkdir()
    with pytest.raises(PublishError, match="is a folder, not an index this tool made"):
        publish_index([make_wheel(tmp_path / "w", "vllm", "0.32.0+cpu")], folder)


def test_the_validator_catches_a_tampered_file_and_disagreeing_pages(
    wheels: Path, tmp_path: Path
) -> None:
    root = tmp_path / "index"
    publish_index(sorted(wheels.glob("*.whl")), root)
    wheel = next((root / "files").glob("vcbdemo-1.0+cpu.avx2*.whl"))
    os.chmod(wheel, 0o644)
    wheel.write_bytes(wheel.read_bytes() + b"x")
    page = root / "avx512" / "simple" / "vcbdemo" / "index.json"
    data = json.loads(page.read_text())
    data["files"] = []
    page.write_text(json.dumps(data))
    problems = validate(root)
    assert any("sha256 fragment does not match the file" in p for p in problems)
    assert any("the JSON page and the HTML page list different files" in p for p in problems)


def test_install_command_picks_the_variant_this_cpu_runs(wheels: Path, tmp_path: Path) -> None:
    root = tmp_path / "index"
    publish_index(sorted(wheels.glob("*.whl")), root)
    plan = plan_install(root.as_uri(), AVX512_HOST, project="vcbdemo")
    assert plan.chosen.filename == "vcbdemo-1.0+cpu.avx512-py3-none-any.whl"
    assert plan.commands[-1][-4:] == (
        "--index-url",
        f"{root.as_uri()}/avx512/simple/",
        "--no-deps",
        "vcbdemo==1.0+cpu.avx512",
    )
    assert plan.commands[0][-3:] == ("--index-url", "https://pypi.org/simple", "packaging")
    assert all("--extra-index-url" not in c for c in plan.commands)
    avx2 = plan_install(root.as_uri(), {"avx2": True, "f16c": True}, project="vcbdemo")
    assert avx2.chosen.filename == "vcbdemo-1.0+cpu.avx2-py3-none-any.whl"
    with pytest.raises(PublishError, match="no variant this CPU runs with vcbdemo"):
        plan_install(root.as_uri(), {}, project="vcbdemo")


@pytest.mark.integration
def test_publish_then_install_command_run_installs_into_a_fresh_venv(
    tmp_path: Path, make_wheel: Callable[..., Path], served: Callable[[Path], str], capsys
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", requires_python=">=3.9")
    index = tmp_path / "public" / "index"
    assert main(["publish", "--wheel-dir", str(wheels), "--index-dir", str(index)]) == 0
    assert "portable/simple/: vcbdemo-1.0+cpu.portable-py3-none-any.whl" in capsys.readouterr().out
    url = served(index.parent) + "index/"
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    argv = ["install-command", "--index", url, "--package", "vcbdemo", "--python", str(python)]
    assert main([*argv, "--run", "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert f"--index-url {url}portable/simple/ --no-deps vcbdemo==1.0+cpu.portable" in out
    done = subprocess.run(
        [python, "-c", "import vcbdemo; print(vcbdemo.ANSWER)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == "42", done.stderr
    assert sys.executable not in out.splitlines()[-1]


@pytest.mark.integration
def test_verify_takes_the_wheel_pip_picks_from_an_index(
    tmp_path: Path, make_wheel: Callable[..., Path], served: Callable[[Path], str]
) -> None:
    from toolchain.verify.environment import wheel_from_index

    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable")
    publish_index(sorted((tmp_path / "wheels").glob("*.whl")), tmp_path / "site" / "index")
    url = served(tmp_path / "site") + "index/portable/simple/"
    wheel = wheel_from_index(url, "vcbdemo", tmp_path / "download", tmp_path / "log")
    assert wheel.name == "vcbdemo-1.0+cpu.portable-py3-none-any.whl" and wheel.is_file()


def test_wheels_this_python_cannot_install_are_not_chosen(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable")
    newer = make_wheel(tmp_path / "other", "vcbdemo", "2.0+cpu.portable")
    newer.rename(wheels / "vcbdemo-2.0+cpu.portable-cp311-cp311-manylinux_2_28_s390x.whl")
    publish_index(sorted(wheels.glob("*.whl")), tmp_path / "index")
    plan = plan_install((tmp_path / "index").as_uri(), AVX512_HOST, project="vcbdemo")
    assert plan.chosen.filename == "vcbdemo-1.0+cpu.portable-py3-none-any.whl"
