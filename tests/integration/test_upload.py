"""Publishing to a real pypiserver on a loopback port: upload, install, and refusals that leave
the server as it was. Credentials come from the environment and never show up in output or logs.
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import sys
import time
import urllib.request
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.errors import PublishError
from toolchain.publish.upload import upload
from toolchain.verify.server import free_port
from toolchain.wheelfile import replace_files

pytestmark = pytest.mark.integration
USER = "builder"


@dataclass
class IndexServer:
    url: str
    packages: Path
    password: str

    def contents(self) -> dict[str, str]:
        """filename -> sha256 of what the server stores."""
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in self.packages.iterdir()}


@pytest.fixture
def pypiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    from passlib.apache import HtpasswdFile

    password = secrets.token_urlsafe(16)
    htpasswd = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    htpasswd.set_password(USER, password)
    htpasswd.save()
    packages = tmp_path / "packages"
    packages.mkdir()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
         "-P", tmp_path / "htpasswd", "-a", "update", "--disable-fallback", packages],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "pypiserver.log").open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "health", timeout=2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, (tmp_path / "pypiserver.log").read_text()
            time.sleep(0.2)
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", password)
    try:
        yield IndexServer(url=url, packages=packages, password=password)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _publish(tmp_path: Path, wheels: Path, url: str) -> int:
    return main(
        ["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "index"),
         "--upload", url, "--work-dir", str(tmp_path / "work")]
    )  # fmt: skip


def test_upload_then_install_from_the_server_into_a_fresh_venv(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path], capsys
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", requires_python=">=3.9")
    assert _publish(tmp_path, wheels, pypiserver.url) == 0
    assert list(pypiserver.contents()) == ["vcbdemo-1.0+cpu.portable-py3-none-any.whl"]
    assert _publish(tmp_path, wheels, pypiserver.url) == 0, "publishing again is a no-op"
    out = capsys.readouterr().out
    assert "already there, identical: vcbdemo-1.0+cpu.portable-py3-none-any.whl" in out

    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    argv = ["install-command", "--index", pypiserver.url + "simple/", "--package", "vcbdemo"]
    assert main([*argv, "--python", str(python), "--run", "--work-dir", str(tmp_path)]) == 0
    done = subprocess.run([python, "-c", "import vcbdemo; print(vcbdemo.ANSWER)"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.stdout.strip() == "42", done.stderr
    log = (tmp_path / "work" / "upload.log").read_text()
    assert pypiserver.password not in out + log


def test_wrong_credentials_are_refused_clearly_and_change_nothing(
    tmp_path: Path,
    pypiserver: IndexServer,
    make_wheel: Callable[..., Path],
    capsys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable")
    monkeypatch.setenv("TWINE_PASSWORD", "not-the-password")
    assert _publish(tmp_path, wheels, pypiserver.url) == 12
    captured = capsys.readouterr()
    assert f"error: {pypiserver.url} refused the credentials" in captured.err
    assert "TWINE_USERNAME and TWINE_PASSWORD" in captured.err
    assert "not-the-password" not in captured.out + captured.err
    assert "not-the-password" not in (tmp_path / "work" / "upload.log").read_text()
    assert pypiserver.contents() == {}


def test_a_clashing_file_is_refused_before_anything_is_sent(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path], capsys
) -> None:
    first = make_wheel(tmp_path / "first", "vcbdemo", "1.0+cpu.portable")
    assert _publish(tmp_path / "a", first.parent, pypiserver.url) == 0
    before = pypiserver.contents()
    wheels = tmp_path / "second"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", requires=("packaging",))  # same name
    make_wheel(wheels, "vcbdemo", "1.1+cpu.portable")
    assert _publish(tmp_path / "b", wheels, pypiserver.url) == 12
    err = capsys.readouterr().err
    assert "already has vcbdemo-1.0+cpu.portable-py3-none-any.whl with different content" in err
    assert "nothing was uploaded" in err
    assert pypiserver.contents() == before


def test_a_failed_upload_removes_what_the_run_sent(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path]
) -> None:
    good = make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.portable")
    broken = make_wheel(tmp_path / "w", "vcbdemo", "1.1+cpu.portable")
    broken.write_bytes(broken.read_bytes()[:200])  # twine refuses a truncated wheel
    with pytest.raises(PublishError) as failed:
        upload([good, broken], pypiserver.url, tmp_path / "upload.log")
    assert failed.value.message.startswith(f"uploading {broken.name} to {pypiserver.url} failed")
    assert failed.value.message.endswith(f"; removed again what this run sent: {good.name}")
    assert pypiserver.contents() == {}


def test_a_rollback_never_removes_files_it_did_not_send(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path], capsys
) -> None:
    """pypiserver removes whole versions: the file that was there before must survive."""
    there = make_wheel(
        tmp_path / "first", "vcbdemo", "1.0+cpu.portable", tag="cp311-cp311-linux_x86_64"
    )
    assert _publish(tmp_path / "a", there.parent, pypiserver.url) == 0
    before = pypiserver.contents()
    wheels = tmp_path / "second"
    wheels.mkdir()
    (wheels / there.name).write_bytes(there.read_bytes())  # identical: skipped
    sent = make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", tag="cp312-cp312-linux_x86_64")
    broken = make_wheel(wheels, "vcbdemo", "1.1+cpu.portable")
    info = "vcbdemo-1.1+cpu.portable.dist-info"
    replace_files(broken, {f"{info}/METADATA": b"Metadata-Version: 2.1\n"})  # twine refuses it
    assert _publish(tmp_path / "b", wheels, pypiserver.url) == 12
    err = capsys.readouterr().err
    assert f"NOT removed, remove by hand: {sent.name} (the server removes whole versions" in err
    assert there.name in err and "removed again" not in err
    assert set(before) <= set(pypiserver.contents()), "the file of the earlier run survives"
    assert not (tmp_path / "b" / "index").exists(), "the static index waits for the upload"


def test_a_password_in_the_upload_url_is_never_shown(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path], capsys
) -> None:
    wheel = make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.portable")
    code = _publish(tmp_path, wheel.parent, f"http://{USER}:not-the-password@127.0.0.1:1/")
    out, err = capsys.readouterr()
    assert code == 12 and "not-the-password" not in out + err
    assert "http://***@127.0.0.1:1" in err  # the whole user part hidden (#31 F4)


def test_on_a_flat_server_the_variant_this_cpu_runs_is_pinned(
    tmp_path: Path, pypiserver: IndexServer, make_wheel: Callable[..., Path], capsys
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.avx2")
    make_wheel(wheels, "vcbdemo", "1.0+cpu.amx")  # pip alone would take this, the highest label
    assert _publish(tmp_path, wheels, pypiserver.url) == 0
    capsys.readouterr()
    argv = ["install-command", "--index", pypiserver.url + "simple/", "--package", "vcbdemo"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = "1.0+cpu.amx" if detect_host().isa.get("amx_tile") else "1.0+cpu.avx2"
    assert f"--index-url {pypiserver.url}simple/ --no-deps vcbdemo=={expected}" in out
