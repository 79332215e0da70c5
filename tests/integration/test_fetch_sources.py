"""fetch-sources: what the requested architectures need, every source checked, failures reported
after the others are in, and a source no recipe has a hash for trusted on first use only."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.util.files import tar_sha256
from toolchain.util.source_lock import LOCK_NAME, read_lock

UNREACHABLE = "http://127.0.0.1:9"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _repo(path: Path, tag: str, text: str) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    (path / "README").write_text(text)
    _git(path, "add", "README")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text)
    _git(path, "tag", tag)
    return path


def _archive_sha256(repo: Path, ref: str, prefix: str) -> str:
    tar = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", f"--prefix={prefix}/", ref],
        check=True,
        capture_output=True,
    ).stdout
    return hashlib.sha256(tar).hexdigest()


@pytest.fixture
def release(tmp_path: Path, fake_recipes: Callable[..., Path]) -> dict[str, Path]:
    """A file:// index with a fake sdist, an x86-only source with a hash, an Arm one without."""
    project = tmp_path / "index" / "vllm"
    project.mkdir(parents=True)
    with tarfile.open(project / "vllm-0.1.0.tar.gz", "w:gz") as tar:
        tar.add(__file__, arcname="vllm-0.1.0/setup.py")
    (project / "index.html").write_text('<a href="vllm-0.1.0.tar.gz">vllm-0.1.0.tar.gz</a>\n')
    dnn = _repo(tmp_path / "fakednn", "v1.0", "dnn")
    acl = _repo(tmp_path / "fakeacl", "v2.0", "acl")
    sdist = project / "vllm-0.1.0.tar.gz"
    recipes = fake_recipes(
        tmp_path,
        sdist=sdist,
        python="3.11",
        rest=f"""[build]
requires = []
memory_per_job_mib = 256
[toolchain]
cmake_min = "3.18"
[[third_party]]
name = "fakednn"
arch = "x86_64"
repository = "{UNREACHABLE}/fakednn.git"
ref = "v1.0"
archive = "fakednn-1.0.tar.gz"
tar_sha256 = "{_archive_sha256(dnn, "v1.0", "fakednn-1.0")}"
env = "FETCHCONTENT_SOURCE_DIR_ONEDNN"
[[third_party]]
name = "fakeacl"
arch = "aarch64"
repository = "{UNREACHABLE}/fakeacl.git"
ref = "v2.0"
archive = "fakeacl-2.0.tar.gz"
env = "ACL_ROOT_DIR"
""",
    )
    return {"recipes": recipes, "index": tmp_path / "index", "dnn": dnn, "acl": acl,
            "mirror": tmp_path / "mirror"}  # fmt: skip


def _fetch(paths: dict[str, Path], *extra: str) -> int:
    return main(
        [
            "fetch-sources",
            "--recipes",
            str(paths["recipes"]),
            "--vllm",
            "0.1.0",
            "--index-url",
            paths["index"].as_uri(),
            "--to",
            str(paths["mirror"]),
            *extra,
        ]
    )


def test_one_architecture_fetches_only_what_it_needs(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _fetch(release, "--arch", "x86_64", "--git", f"fakednn={release['dnn']}") == 0
    out = capsys.readouterr().out
    assert "fakednn-1.0.tar.gz: tar sha256" in out and "matches the recipe" in out
    assert sorted(p.name for p in release["mirror"].glob("*.tar.gz")) == [
        "fakednn-1.0.tar.gz",
        "vllm-0.1.0.tar.gz",
    ]


def test_an_unreachable_source_does_not_cost_the_others(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = _fetch(release, "--arch", "all", "--git", f"fakednn={release['dnn']}")
    err = capsys.readouterr().err
    assert code == 8
    assert "1 of 2 third-party sources for x86_64, aarch64 could not be put in" in err
    assert "fakeacl-2.0.tar.gz (fakeacl v2.0, aarch64): download of" in err
    assert tar_sha256(release["mirror"] / "fakednn-1.0.tar.gz")  # kept, and a real tar
    assert not (release["mirror"] / "fakeacl-2.0.tar.gz").exists()


def test_a_source_without_a_recipe_hash_is_trusted_on_first_use_only(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    acl = ("--arch", "aarch64", "--git", f"fakeacl={release['acl']}")
    assert _fetch(release, *acl) == 0
    out = capsys.readouterr().out
    expected = _archive_sha256(release["acl"], "v2.0", "fakeacl-2.0")
    assert "warning: trust on first use" in out
    assert f'[[third_party]] fakeacl v2.0: tar_sha256 = "{expected}"' in out
    assert read_lock(release["mirror"])["fakeacl-2.0.tar.gz"]["tar_sha256"] == expected

    assert _fetch(release, *acl) == 0
    assert "matches the hash recorded on first use" in capsys.readouterr().out

    # The tag now points at other content: refused, nothing kept, the lock unchanged.
    _git(release["acl"], "tag", "-d", "v2.0")
    (release["acl"] / "README").write_text("changed")
    _git(release["acl"], "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x")
    _git(release["acl"], "tag", "v2.0")
    lock = (release["mirror"] / LOCK_NAME).read_bytes()
    assert _fetch(release, *acl) == 8
    assert f"recorded {expected} when it was first used" in capsys.readouterr().err
    assert not (release["mirror"] / "fakeacl-2.0.tar.gz").exists()
    assert (release["mirror"] / LOCK_NAME).read_bytes() == lock
