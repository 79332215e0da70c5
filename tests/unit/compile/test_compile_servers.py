"""The compilers an sccache server runs belong to the build: found by the server's executable."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.compile.compilation import descendants, process_table, running
from toolchain.compile.shared_cache import server_cpu_seconds


def _process(proc: Path, pid: int, parent: int, name: str, exe: Path, ticks: int = 0) -> None:
    entry = proc / str(pid)
    entry.mkdir()
    # utime stime cutime cstime (fields 14-17) and the start time (field 22)
    fields = ["S", str(parent), *["0"] * 9, str(ticks), str(ticks), str(ticks), str(ticks)]
    fields += ["0"] * 4 + [str(pid)]
    (entry / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (entry / "statm").write_text("100 25 0 0 0 0 0\n")
    (entry / "exe").symlink_to(exe)


def test_this_builds_server_and_its_compilers_are_found(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours" / "sccache", tmp_path / "theirs" / "sccache"
    for binary in (ours, theirs):
        binary.parent.mkdir()
        binary.write_text("")
    proc = tmp_path / "proc"
    proc.mkdir()
    _process(proc, 100, 1, "sccache", ours, ticks=250)
    _process(proc, 101, 100, "g++-12", tmp_path / "g++")
    _process(proc, 102, 101, "cc1plus", tmp_path / "cc1plus")
    _process(proc, 200, 1, "sccache", theirs, ticks=999)  # another build's server
    _process(proc, 201, 200, "cc1plus", tmp_path / "cc1plus")
    table = process_table(proc)
    assert running(ours, table, proc) == [100]
    assert {p.pid for p in descendants(100, table)} == {101, 102}
    assert server_cpu_seconds(ours, proc) == 4 * 250 / os.sysconf("SC_CLK_TCK")
