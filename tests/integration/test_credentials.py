"""`python -m toolchain` never puts a credential on a child's command line, nor on the screen
(#31's acceptance test, F5), and credentials in a URL reach a real pypiserver (F6).

The children run against a loopback index that takes their connection and holds it open, so
they are alive while every /proc/PID/cmdline on the machine is read; their /proc/PID/environ
shows that the credentials did reach them, through the environment.
"""

from __future__ import annotations

import hashlib
import os
import platform
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import venv
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import PublishError
from toolchain.publish.index import publish_index
from toolchain.publish.upload import upload

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HOLD_SECONDS = 90  # the longest a child is held; the scan gives up well before
SCAN_SECONDS = 60


@dataclass
class StallingIndex:
    """Serves `folder` to this toolkit's own urllib requests; holds every other client's
    connection open (pip, twine: the children) until released."""

    folder: Path
    url: str = ""
    held: list[str] = field(default_factory=list)  # the User-Agent of each held request
    release: threading.Event = field(default_factory=threading.Event)


def _handler(index: StallingIndex) -> type:
    class Handler(SimpleHTTPRequestHandler):
        def _hold_unless_ours(self) -> bool:
            agent = self.headers.get("User-Agent", "")
            if agent.startswith("Python-urllib"):
                return False
            index.held.append(agent)
            index.release.wait(HOLD_SECONDS)
            self.close_connection = True
            return True

        def do_GET(self) -> None:
            if not self._hold_unless_ours():
                super().do_GET()

        def do_POST(self) -> None:
            self._hold_unless_ours()

        def log_message(self, *args: object) -> None:
            pass

    return partial(Handler, directory=str(index.folder))


@pytest.fixture
def stalling_index(tmp_path: Path) -> Iterator[StallingIndex]:
    index = StallingIndex(folder=tmp_path / "served")
    index.folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    index.url = f"127.0.0.1:{server.server_address[1]}"
    try:
        yield index
    finally:
        index.release.set()
        server.shutdown()


def _processes() -> dict[int, tuple[int, bytes, bytes]]:
    """pid -> (parent pid, cmdline, environ) of every process on the machine that can be read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                found[int(entry.name)] = (
                    int(stat.rpartition(")")[2].split()[1]),
                    (entry / "cmdline").read_bytes(),
                    (entry / "environ").read_bytes(),
                )
            except (OSError, ValueError, IndexError):
                continue  # gone, or not ours to read
    return found


def _descends(pid: int, ancestor: int, processes: dict[int, tuple[int, bytes, bytes]]) -> bool:
    while pid in processes and pid > 1:
        pid = processes[pid][0]
        if pid == ancestor:
            return True
    return False


def _scan_while_held(
    argv: list[str], child: bytes, secret: str, index: StallingIndex, env: dict[str, str]
) -> tuple[int, str]:
    """Run `python -m toolchain ARGV` until its child (a command line holding `child`) has been
    seen held by the index; (how often it was seen, the toolkit's output). Every command line on
    the machine read meanwhile, but the toolkit's own, is checked for `secret`."""
    log = Path(env["VCB_WORK_DIR"]) / "toolkit.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        toolkit = subprocess.Popen(
            [sys.executable, "-m", "toolchain", *argv],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    seen, deadline = 0, time.monotonic() + SCAN_SECONDS
    try:
        while time.monotonic() < deadline and seen < 5 and toolkit.poll() is None:
            processes = _processes()
            for pid, (_, cmdline, environ) in processes.items():
                # the toolkit's own command line is the user's: with --index it holds the URL
                assert pid == toolkit.pid or secret.encode() not in cmdline, f"{pid}: {cmdline!r}"
                mine = _descends(pid, toolkit.pid, processes)
                if mine and child in cmdline and index.held:
                    assert secret.encode() in environ, "the child got the credentials"
                    seen += 1
            time.sleep(0.2)
    finally:
        if toolkit.poll() is None:
            os.killpg(toolkit.pid, 9)  # the toolkit and the children it started
        toolkit.wait(timeout=30)
    return seen, log.read_text(errors="replace")


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VCB_WORK_DIR": str(tmp_path / "work")}
    for name in ("TWINE_USERNAME", "TWINE_PASSWORD", "PIP_INDEX_URL"):
        env.pop(name, None)
    return env


def test_pip_fetching_the_sdist_has_no_credential_on_its_command_line(
    tmp_path: Path,
    stalling_index: StallingIndex,
    child_env: dict[str, str],
    fake_recipes: Callable[..., Path],
) -> None:
    secret = secrets.token_urlsafe(12)
    sdist = tmp_path / "vllm-0.1.0.tar.gz"
    sdist.write_bytes(b"sdist")
    rest = '[build]\nrequires = []\nmemory_per_job_mib = 256\n[toolchain]\ncmake_min = "3.18"\n'
    recipes = fake_recipes(tmp_path, sdist=sdist, python="3.11", rest=rest)
    child_env["VCB_INDEX_URL"] = f"http://builder:{secret}@{stalling_index.url}/simple/"
    argv = ["fetch-sources", "--to", str(tmp_path / "mirror"), "--recipes", str(recipes)]
    seen, out = _scan_while_held(
        argv, b"toolchain.compile.pip_sdist", secret, stalling_index, child_env
    )
    assert seen >= 5, out
    assert stalling_index.held[0].startswith("pip/") and secret not in out


def test_twine_has_no_credential_on_its_command_line(
    tmp_path: Path,
    stalling_index: StallingIndex,
    child_env: dict[str, str],
    make_wheel: Callable[..., Path],
) -> None:
    secret = secrets.token_urlsafe(12)
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.portable")
    child_env["VCB_UPLOAD"] = f"http://builder:{secret}@{stalling_index.url}/"
    child_env["VCB_SERVER_KIND"] = "pypiserver"  # the stalling fake answers like no real server
    argv = ["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "index")]
    seen, out = _scan_while_held(argv, b"twine\x00upload", secret, stalling_index, child_env)
    assert seen >= 5, out
    assert "twine" in stalling_index.held[0] and secret not in out


@pytest.mark.parametrize("via", ["index", "env"])
def test_install_command_run_has_no_credential_on_pip_s_command_line(
    tmp_path: Path,
    stalling_index: StallingIndex,
    child_env: dict[str, str],
    make_wheel: Callable[..., Path],
    via: str,
) -> None:
    secret = secrets.token_urlsafe(12)
    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable", requires=("packaging",))
    publish_index(sorted((tmp_path / "wheels").glob("*.whl")), stalling_index.folder / "index")
    target = tmp_path / "target"
    venv.create(target, system_site_packages=True, with_pip=False)  # pip comes from the base
    url = f"http://{secret}@{stalling_index.url}/index/"  # a token as the user name
    argv = ["install-command", "--python", str(target / "bin" / "python"), "--run",
            "--package", "vcbdemo", "--index", url]  # fmt: skip
    if via == "env":  # the public index (for the requirements) from VCB_INDEX_URL
        argv[-1] = f"http://{stalling_index.url}/index/"
        child_env["VCB_INDEX_URL"] = f"http://u:{secret}@{stalling_index.url}/pypi/simple/"
    seen, out = _scan_while_held(argv, b"pip\x00install", secret, stalling_index, child_env)
    assert seen >= 5, out
    assert stalling_index.held[0].startswith("pip/") and secret not in out


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 level variants")
def test_install_command_run_has_no_credential_on_uv_s_command_line(
    tmp_path: Path,
    stalling_index: StallingIndex,
    child_env: dict[str, str],
    make_wheel: Callable[..., Path],
) -> None:
    secret = secrets.token_urlsafe(12)
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vcbdemo", "1.0+cpu.avx2", tag="py3-none-linux_x86_64")
    publish_index(sorted(wheels.glob("*.whl")), stalling_index.folder / "i", wheel_variants=True)
    target = tmp_path / "target"
    venv.create(target, with_pip=False)
    url = f"http://u:{secret}@{stalling_index.url}/i/"
    argv = ["install-command", "--installer", "uv", "--python", str(target / "bin" / "python"),
            "--run", "--package", "vcbdemo", "--index", url]  # fmt: skip
    seen, out = _scan_while_held(argv, b"uv\x00pip\x00install", secret, stalling_index, child_env)
    assert seen >= 5, out
    assert stalling_index.held[0].startswith("uv/") and secret not in out


def test_verify_index_has_no_credential_on_pip_s_command_line(
    tmp_path: Path,
    stalling_index: StallingIndex,
    child_env: dict[str, str],
) -> None:
    secret = secrets.token_urlsafe(12)
    url = f"http://builder:{secret}@{stalling_index.url}/simple/"
    argv = ["verify", "--index", url, "--package", "vcbdemo"]
    seen, out = _scan_while_held(argv, b"pip\x00download", secret, stalling_index, child_env)
    assert seen >= 5, out
    assert stalling_index.held[0].startswith("pip/") and secret not in out


# --- F6: credentials in the URL reach a real pypiserver ---------------------------------------

USER = "builder"


@dataclass
class PrivateServer:
    url: str  # with the credentials in it
    packages: Path
    password: str


@pytest.fixture
def private_pypiserver(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_pypiserver: Callable[..., AbstractContextManager[tuple[str, Path]]],
) -> Iterator[PrivateServer]:
    """pypiserver that wants credentials for listing, downloading and uploading."""
    password = secrets.token_urlsafe(16) + "@:/"  # characters that need percent-encoding
    for name in ("TWINE_USERNAME", "TWINE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    running = start_pypiserver(tmp_path, USER, password, authenticate="update,download,list")
    with running as (url, packages):
        quoted = urllib.parse.quote(password, safe="")
        with_user = url.replace("http://", f"http://{USER}:{quoted}@", 1)
        yield PrivateServer(url=with_user, packages=packages, password=password)


def test_credentials_in_the_url_upload_list_and_install(
    tmp_path: Path,
    private_pypiserver: PrivateServer,
    make_wheel: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    wheels = tmp_path / "wheels"
    wheel = make_wheel(wheels, "vcbdemo", "1.0+cpu.portable", requires_python=">=3.9")
    publish = ["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "index"),
               "--upload", private_pypiserver.url, "--work-dir", str(tmp_path / "wk")]  # fmt: skip
    assert main(publish) == 0
    stored = private_pypiserver.packages / wheel.name
    assert (
        hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(wheel.read_bytes()).digest()
    )
    assert main(publish) == 0, "listed through the credentials: the same file is skipped"
    assert "already there, identical" in capsys.readouterr().out

    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    argv = ["install-command", "--index", private_pypiserver.url + "simple/", "--package",
            "vcbdemo", "--python", str(python), "--work-dir", str(tmp_path / "w")]  # fmt: skip
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "--index-url http://127.0.0.1:" in shown and "credentials are not shown" in shown
    assert main([*argv, "--run"]) == 0
    done = subprocess.run([python, "-c", "import vcbdemo; print(vcbdemo.ANSWER)"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.stdout.strip() == "42", done.stderr
    quoted = urllib.parse.quote(private_pypiserver.password, safe="")
    out = capsys.readouterr().out
    logs = "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    for text in (private_pypiserver.password, quoted):
        assert text not in out + logs


def test_a_failed_upload_is_rolled_back_with_the_credentials_of_the_url(
    tmp_path: Path, private_pypiserver: PrivateServer, make_wheel: Callable[..., Path]
) -> None:
    good = make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.portable")
    broken = make_wheel(tmp_path / "w", "vcbdemo", "1.1+cpu.portable")
    broken.write_bytes(broken.read_bytes()[:200])  # twine refuses a truncated wheel
    with pytest.raises(PublishError) as failed:
        upload([good, broken], private_pypiserver.url, tmp_path / "upload.log")
    assert failed.value.message.endswith(f"; removed again what this run sent: {good.name}")
    assert list(private_pypiserver.packages.iterdir()) == []
    assert private_pypiserver.password not in failed.value.message


@pytest.fixture
def ipv6_index(tmp_path: Path, make_wheel: Callable[..., Path]) -> Iterator[str]:
    class V6(ThreadingHTTPServer):
        address_family = socket.AF_INET6

    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable")
    publish_index(sorted((tmp_path / "wheels").glob("*.whl")), tmp_path / "site" / "index")
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = V6(("::1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://u:pw@[::1]:{server.server_address[1]}/index/"
    finally:
        server.shutdown()


def test_an_ipv6_index_with_credentials_is_read(
    ipv6_index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install-command", "--index", ipv6_index, "--package", "vcbdemo"]) == 0
    out = capsys.readouterr().out
    assert "--index-url 'http://[::1]:" in out or "--index-url http://[::1]:" in out, out
