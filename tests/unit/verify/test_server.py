"""Engines get a private temp folder; servers are stopped with all they started."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from toolchain.verify.server import Server, free_port, http, scratch


def test_scratch_keeps_a_segment_another_process_still_holds(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    with scratch({"PATH": "/bin"}, shm=shm) as place:
        (shm / "psm_left").write_text("left by this run's engine")
        held = (shm / "psm_held").open("w")  # another run's engine, started meanwhile
    with held:
        assert sorted(p.name for p in shm.iterdir()) == ["psm_held"]
    assert place.removed == [str(shm / "psm_left")]


def test_scratch_removes_what_was_added_to_shm_and_its_folder(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "someone-elses").write_text("kept")
    with scratch({"PATH": "/bin"}, shm=shm) as place:
        assert place.env["TMPDIR"] == str(place.folder) and place.folder.is_dir()
        (shm / "psm_1234").write_text("left by an engine")
        (shm / "torch_shm").mkdir()
    assert sorted(p.name for p in shm.iterdir()) == ["someone-elses"]
    assert place.removed == [str(shm / "psm_1234"), str(shm / "torch_shm")]
    assert not place.folder.exists()


def test_scratch_cleans_up_when_the_engine_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), scratch({}, shm=tmp_path) as place:
        (tmp_path / "left").write_text("")
        raise RuntimeError("engine died")
    assert list(tmp_path.iterdir()) == [] and not place.folder.exists()


SERVER = """
import http.server, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[2], "w").write(str(child.pid))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.integration
def test_a_server_is_ready_on_a_free_port_and_stop_ends_its_children(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent(SERVER))
    port, child_file = free_port(), tmp_path / "child.pid"
    server = Server(
        [sys.executable, script, str(port), child_file],
        env=dict(os.environ),
        cwd=tmp_path,
        log=tmp_path / "server.log",
    )
    try:
        assert server.wait_ready(f"http://127.0.0.1:{port}/", timeout=30) == ""
        assert http(f"http://127.0.0.1:{port}/") == (200, b"ok")
    finally:
        server.stop(grace=5)
    child = int(child_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the server's child outlived stop()"
    assert server.process.returncode is not None


@pytest.mark.integration
def test_a_server_that_exits_early_is_reported_not_waited_for(tmp_path: Path) -> None:
    server = Server(
        [sys.executable, "-c", "raise SystemExit(3)"],
        env=dict(os.environ),
        cwd=tmp_path,
        log=tmp_path / "server.log",
    )
    started = time.monotonic()
    assert server.wait_ready("http://127.0.0.1:9/", timeout=60) == (
        "the server exited with code 3 before it was ready"
    )
    assert time.monotonic() - started < 30
    server.stop()
