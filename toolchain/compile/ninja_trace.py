"""A Chrome trace of a compile from ninja's `.ninja_log`, as ninjatracing writes it: one complete
event ("ph": "X") per command, packed into rows so that no two events of a row overlap; open it in
Perfetto (ui.perfetto.dev) or chrome://tracing to see the build's timeline.

`.ninja_log` (v5 and v6): a header line, then `start_ms end_ms mtime output hash` separated by
tabs, appended by every ninja run. Like ninjatracing, only the last run is drawn (a run starts
where an end time goes backwards) and the outputs of one command (same hash and times) are one
event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError
from toolchain.util.files import atomic_path


@dataclass(frozen=True, kw_only=True)
class Command:
    start_ms: int
    end_ms: int
    outputs: tuple[str, ...]


def read_ninja_log(path: Path) -> list[Command]:
    """The commands of the last ninja run in this log, in the order they started."""
    lines = path.read_text(errors="replace").splitlines()
    if not lines or not lines[0].startswith("# ninja log v"):
        raise DataFileError(f"{path}: not a .ninja_log (no '# ninja log vN' header)")
    runs: list[list[tuple[int, int, str, str]]] = [[]]
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 5 or not (fields[0].isdigit() and fields[1].isdigit()):
            raise DataFileError(f"{path}:{number}: expected start, end, mtime, output, hash")
        start, end = int(fields[0]), int(fields[1])
        if runs[-1] and end < runs[-1][-1][1]:
            runs.append([])  # ninja restarted its clock: a new run
        runs[-1].append((start, end, fields[3], fields[4]))
    merged: dict[tuple[int, int, str], list[str]] = {}
    for start, end, output, command_hash in runs[-1]:
        merged.setdefault((start, end, command_hash), []).append(output)
    commands = [Command(start_ms=s, end_ms=e, outputs=tuple(o)) for (s, e, _), o in merged.items()]
    return sorted(commands, key=lambda c: (c.start_ms, c.end_ms))


def trace_events(commands: list[Command]) -> list[dict[str, Any]]:
    """Complete events in microseconds, each on the first row free when it starts."""
    row_ends: list[int] = []
    events = []
    for command in commands:
        row = next((i for i, end in enumerate(row_ends) if end <= command.start_ms), None)
        if row is None:
            row_ends.append(0)
            row = len(row_ends) - 1
        row_ends[row] = command.end_ms
        events.append(
            {
                "name": ", ".join(command.outputs),
                "cat": "targets",
                "ph": "X",
                "ts": command.start_ms * 1000,
                "dur": (command.end_ms - command.start_ms) * 1000,
                "pid": 0,
                "tid": row,
                "args": {},
            }
        )
    return events


def write_trace(ninja_log: Path, destination: Path) -> int:
    """Write the trace of this log's last run; the number of commands in it."""
    events = trace_events(read_ninja_log(ninja_log))
    with atomic_path(destination) as temporary:
        temporary.write_text(json.dumps(events, indent=None, separators=(",", ":")) + "\n")
    return len(events)
