"""Publishing to a real pypiserver on a loopback port: upload, install, and refusals that leave
the server as it was. Credentials come from the environment and never show up in output or logs.
"""

from __future__ import annotations

import subprocess
import venv
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from toolchain.cli import main
from toolchain.detect.host import detect_host
from toolchain.errors import PublishError
from toolchain.publish.upload import upload
from toolchain.wheelfile import replace_files

if TYPE_CHECKING:
    from conftest import IndexServer  # the pypiserver fixture's value

pytestmark = pytest.mark.integration
USER = "builder"  # any user: the server here is not listening


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
