"""fetch-sources: what the requested architectures need, every source checked, failures reported
after the others are in, and a source no recipe has a hash for trusted on first use only."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
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

    # The tag now points at other content: the checked file in the mirror is kept, not fetched
    # again; fetched anew (the file gone), the new content is refused, the lock unchanged.
    _git(release["acl"], "tag", "-d", "v2.0")
    (release["acl"] / "README").write_text("changed")
    _git(release["acl"], "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x")
    _git(release["acl"], "tag", "v2.0")
    lock = (release["mirror"] / LOCK_NAME).read_bytes()
    assert _fetch(release, *acl) == 0
    assert "already in the mirror" in capsys.readouterr().out
    (release["mirror"] / "fakeacl-2.0.tar.gz").unlink()
    assert _fetch(release, *acl) == 8
    assert f"recorded {expected} when it was first used" in capsys.readouterr().err
    assert not (release["mirror"] / "fakeacl-2.0.tar.gz").exists()
    assert (release["mirror"] / LOCK_NAME).read_bytes() == lock


def _dnn_tar_gz(repo: Path) -> bytes:
    """The fake oneDNN release as GitHub serves it: the tag's tree under NAME-VERSION/, gzipped."""
    tar = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", "--prefix=fakednn-1.0/", "v1.0"],
        check=True,
        capture_output=True,
    ).stdout
    return gzip.compress(tar)


def _parts(mirror: Path) -> list[str]:
    return sorted(path.name for path in mirror.glob(".*part*"))


def test_a_failed_refresh_never_touches_the_good_archive_in_the_mirror(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #31 F1: a rerun without GitHub (or with a clone that lacks the tag) deleted the good,
    checked archive already in the mirror. Now a checked file is kept and not fetched again."""
    x86 = ("--arch", "x86_64")
    assert _fetch(release, *x86, "--git", f"fakednn={release['dnn']}") == 0
    archive = release["mirror"] / "fakednn-1.0.tar.gz"
    good, stat = archive.read_bytes(), archive.stat()
    capsys.readouterr()

    assert _fetch(release, *x86) == 0  # no GitHub here: nothing to fetch, the file is good
    assert "fakednn-1.0.tar.gz: tar sha256" in capsys.readouterr().out
    no_tag = _repo(release["dnn"].parent / "notag", "v0.9", "old")
    assert _fetch(release, *x86, "--git", f"fakednn={no_tag}") == 0
    assert "already in the mirror, matches the recipe" in capsys.readouterr().out
    assert archive.read_bytes() == good and archive.stat().st_mtime_ns == stat.st_mtime_ns

    # A damaged file is fetched anew; when that fails too, it is left as it was, nothing beside it.
    archive.write_bytes(good[: len(good) // 2])
    assert _fetch(release, *x86, "--git", f"fakednn={no_tag}") == 8
    err = capsys.readouterr().err
    assert f"the clone {no_tag} has no v1.0" in err
    assert archive.read_bytes() == good[: len(good) // 2]
    assert _parts(release["mirror"]) == []
    assert _fetch(release, *x86, "--git", f"fakednn={release['dnn']}") == 0
    assert archive.read_bytes() != good[: len(good) // 2] and tar_sha256(archive)


def test_a_clone_without_the_tag_costs_only_its_own_source(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #31 F7: `git archive` of a missing tag stopped every source with exit 7."""
    no_tag = _repo(release["dnn"].parent / "notag", "v0.9", "old")
    code = _fetch(
        release, "--arch", "all", "--git", f"fakednn={no_tag}", "--git", f"fakeacl={release['acl']}"
    )
    err = capsys.readouterr().err
    assert code == 8, err
    assert "1 of 2 third-party sources" in err
    assert f"fakednn-1.0.tar.gz (fakednn v1.0, x86_64): the clone {no_tag} has no v1.0" in err
    assert "Traceback" not in err
    assert tar_sha256(release["mirror"] / "fakeacl-2.0.tar.gz")
    assert not (release["mirror"] / "fakednn-1.0.tar.gz").exists()
    assert _parts(release["mirror"]) == []


@pytest.mark.parametrize("name", ["FakeDNN", "onednn", "fakedn"])
def test_an_unknown_git_name_is_refused_naming_the_recipes_names(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Issue #31 F23: a misspelled --git name was ignored and the source downloaded instead."""
    assert _fetch(release, "--arch", "x86_64", "--git", f"{name}={release['dnn']}") == 2
    err = capsys.readouterr().err
    assert f"error: --git {name}: vllm-0.1.0.toml has no third-party source of that name" in err
    assert "next: its third-party sources are: fakeacl, fakednn" in err
    assert not release["mirror"].exists()


@pytest.mark.parametrize(
    ("git", "message"),
    [
        (["=/src"], "--git takes NAME=PATH"),
        (["fakednn=/a", "fakednn=/b"], "--git fakednn is given twice (/a, /b)"),
    ],
)
def test_git_names_are_checked_before_anything_is_fetched(
    release: dict[str, Path], capsys: pytest.CaptureFixture[str], git: list[str], message: str
) -> None:
    """Issue #31 F23: an empty name, or one given twice (the last silently won)."""
    options = [arg for item in git for arg in ("--git", item)]
    assert _fetch(release, "--arch", "x86_64", *options) == 2
    assert message in capsys.readouterr().err
    assert not release["mirror"].exists()


class _Archive(BaseHTTPRequestHandler):
    """GitHub's archive URL on a loopback port: the whole body, a wrong body, or half a body and
    then a connection held open until the test ends."""

    body = b""
    mode = "whole"
    release = threading.Event()

    def do_GET(self) -> None:
        if self.path != "/fakednn/archive/v1.0.tar.gz":
            self.send_error(404)
            return
        body = gzip.compress(b"not the tag") if self.mode == "wrong" else self.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.mode == "stall":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.release.wait(60)
            return
        self.wfile.write(body)


@pytest.fixture
def github(
    release: dict[str, Path], http_server: Callable[[type[BaseHTTPRequestHandler]], str]
) -> Iterator[type[_Archive]]:
    """The recipe's fakednn repository on a loopback server, the sdist already in the mirror."""
    handler = type("Archive", (_Archive,), {"body": _dnn_tar_gz(release["dnn"]),
                                             "release": threading.Event()})  # fmt: skip
    url = http_server(handler)
    recipe = release["recipes"] / "vllm-0.1.0.toml"
    recipe.write_text(recipe.read_text().replace(f"{UNREACHABLE}/fakednn", f"{url}/fakednn"))
    release["mirror"].mkdir()
    shutil.copy(release["index"] / "vllm" / "vllm-0.1.0.tar.gz", release["mirror"])
    yield handler
    handler.release.set()


def test_a_wrong_download_leaves_nothing_in_the_mirror(
    release: dict[str, Path], github: type[_Archive], capsys: pytest.CaptureFixture[str]
) -> None:
    github.mode = "wrong"
    assert _fetch(release, "--arch", "x86_64") == 8
    assert "the archive made for fakednn-1.0.tar.gz holds a tar with sha256" in (
        capsys.readouterr().err
    )
    assert sorted(p.name for p in release["mirror"].iterdir()) == ["vllm-0.1.0.tar.gz"]
    github.mode = "whole"
    assert _fetch(release, "--arch", "x86_64") == 0
    assert tar_sha256(release["mirror"] / "fakednn-1.0.tar.gz")


def test_a_download_killed_midway_leaves_no_archive_and_the_next_run_cleans_up(
    release: dict[str, Path], github: type[_Archive]
) -> None:
    """Issue #31 F1: `kill -9` while the archive downloads: the half file has a temporary name no
    build or later run takes for the archive, and the next run removes it."""
    github.mode = "stall"
    argv = [sys.executable, "-m", "toolchain", "fetch-sources", "--recipes",
            str(release["recipes"]), "--vllm", "0.1.0", "--index-url", release["index"].as_uri(),
            "--to", str(release["mirror"]), "--arch", "x86_64"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _parts(release["mirror"]):  # made once the server's answer began
            assert time.monotonic() < deadline and child.poll() is None, "no download started"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    assert _parts(release["mirror"]) == [f".fakednn-1.0.tar.gz.{child.pid}.part"]
    assert not (release["mirror"] / "fakednn-1.0.tar.gz").exists()

    github.mode = "whole"
    github.release.set()
    assert _fetch(release, "--arch", "x86_64") == 0
    assert _parts(release["mirror"]) == []
    assert tar_sha256(release["mirror"] / "fakednn-1.0.tar.gz")
