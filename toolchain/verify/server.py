"""Running vLLM engines for `verify`: a private temp folder, the server's lifetime, clean-up.

vLLM leaves IPC sockets and files in the temp folder and shared memory in /dev/shm; a check gives
each engine its own TMPDIR and removes what it added to /dev/shm, even when the engine fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.util import run

SHM = Path("/dev/shm")


@dataclass
class Scratch:
    """A run folder with nothing named vllm in it, and the environment an engine gets."""

    folder: Path
    env: dict[str, str]
    removed: list[str] = field(default_factory=list)


def _owned_entries(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.iterdir() if p.lstat().st_uid == os.getuid()}
    except OSError:
        return set()


def _in_use(paths: set[Path]) -> set[Path]:
    """Which of `paths` a live process still has open or mapped: the segments of an engine of
    another verify or bench running at the same time, which appeared during this run too."""
    if not paths:
        return set()
    names = {str(path) for path in paths}
    used: set[Path] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            maps = (proc / "maps").read_text().splitlines()
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to read
        held = {line.split(maxsplit=5)[-1] for line in maps} | {_link(fd) for fd in fds}
        used |= {Path(name) for name in names & held}
    return used


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile (the listing's own descriptor, for one)
        return ""


@contextmanager
def scratch(env: Mapping[str, str], shm: Path = SHM) -> Iterator[Scratch]:
    """A temp folder used as cwd and TMPDIR; on exit it and new /dev/shm entries are removed."""
    before = _owned_entries(shm)
    folder = Path(tempfile.mkdtemp(prefix="vcb-verify-"))
    state = Scratch(folder=folder, env={**env, "TMPDIR": str(folder)})
    try:
        yield state
    finally:
        added = {shm / name for name in _owned_entries(shm) - before}
        for path in sorted(added - _in_use(added)):  # another run's engine may hold some
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
            state.removed.append(str(path))
        shutil.rmtree(folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http(url: str, body: bytes | None = None, timeout: float = 120) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"} if body else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Server:
    """A server process in its own process group, stopped with everything it started."""

    def __init__(
        self, argv: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path, log: Path
    ) -> None:
        self.log = log
        self.process = run.start_logged(argv, log=log, env=env, cwd=cwd)

    def wait_ready(self, health_url: str, timeout: float) -> str:
        """'' once `health_url` answers 200; otherwise why it never did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return f"the server exited with code {code} before it was ready"
            try:
                if http(health_url, timeout=5)[0] == 200:
                    return ""
            except OSError:
                pass
            time.sleep(1)
        return f"the server was not ready after {timeout:.0f} s"

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to the whole group, then SIGKILL to whatever is left of it."""
        run.send_signal(self.process.pid, signal.SIGTERM, group=True)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace)
        deadline = time.monotonic() + 10
        while run.send_signal(self.process.pid, 0, group=True) and time.monotonic() < deadline:
            time.sleep(0.5)  # engine workers shut down after the API process
        run.send_signal(self.process.pid, signal.SIGKILL, group=True)
        self.process.wait()
