"""The Chrome trace of a compile, from a saved .ninja_log (ninjatracing's format)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from toolchain.compile.ninja_trace import read_ninja_log, write_trace
from toolchain.errors import DataFileError

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "ninja" / "two-runs.ninja_log"


def test_the_trace_shows_the_last_run_as_complete_events_in_microseconds(tmp_path: Path) -> None:
    trace = tmp_path / "w.whl.trace.json"
    assert write_trace(LOG, trace) == 3
    events = json.loads(trace.read_text())
    assert [(e["name"], e["ts"], e["dur"], e["tid"]) for e in events] == [
        ("CMakeFiles/ops.dir/u3.cpp.o", 0, 74_000, 0),
        ("libops.a", 75_000, 532_000, 0),
        ("app", 607_000, 311_000, 0),
    ]
    assert all(e["ph"] == "X" and e["pid"] == 0 for e in events)


def test_commands_that_overlap_go_on_separate_rows(tmp_path: Path) -> None:
    first_run = tmp_path / "first.ninja_log"
    first_run.write_text("".join(LOG.read_text().splitlines(keepends=True)[:8]))
    assert write_trace(first_run, tmp_path / "t.json") == 7
    events = json.loads((tmp_path / "t.json").read_text())
    rows = {e["name"]: e["tid"] for e in events}
    assert rows["CMakeFiles/ops.dir/u1.cpp.o"] != rows["CMakeFiles/ops.dir/u2.cpp.o"], "-j2"
    assert set(rows.values()) == {0, 1}, "two rows are enough for two jobs"
    for row in (0, 1):
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == row)
        assert all(a[1] <= b[0] for a, b in pairwise(spans)), "no overlap"


def test_the_outputs_of_one_command_are_one_event(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text("# ninja log v5\n0\t10\t0\ta.o\tabc\n0\t10\t0\ta.d\tabc\n5\t20\t0\tb.o\tdef\n")
    assert [c.outputs for c in read_ninja_log(log)] == [("a.o", "a.d"), ("b.o",)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not a .ninja_log"),
        ("# ninja log v5\n1\t2\tx.o\n", ".ninja_log:2: expected start, end, mtime, output, hash"),
    ],
)
def test_a_damaged_log_is_named(tmp_path: Path, text: str, message: str) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text(text)
    with pytest.raises(DataFileError, match=message):
        read_ninja_log(log)
