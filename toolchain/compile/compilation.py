"""The long compile step: live progress, a log file, and a memory guard that pauses compilers.

Upstream lets ninja run MAX_JOBS compilers whatever memory is left; when the kernel runs out it
kills one and the build fails after an hour. Here, when available memory falls under a margin, the
youngest compiler processes are stopped (SIGSTOP) until the others finish and memory returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.compile.progress import (
    QUIET_INTERVAL,
    Phases,
    ci_folding,
    counter,
    eta_seconds,
    phase_of,
)
from toolchain.compile.unit_memory import UnitMemory
from toolchain.detect.memory import read_memory
from toolchain.errors import ProcessFailedError
from toolchain.util.report import reporter
from toolchain.util.run import send_signal, start_streaming, tail
from toolchain.util.units import GIB

NINJA_STEP = re.compile(r"\[(\d+)/(\d+)\]")
COMPILERS = frozenset({"cc1plus", "cc1", "lto1", "ld", "collect2"})
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, kw_only=True)
class Process:
    pid: int
    parent: int
    name: str
    rss_bytes: int
    started: int
    cpu_ticks: int = 0  # utime + stime + cutime + cstime: its own and its reaped children's


@dataclass(kw_only=True)
class CompileStats:
    seconds: float = 0.0
    steps_done: int = 0
    steps_total: int = 0
    peak_rss_bytes: int = 0
    min_available_bytes: int | None = None
    pauses: int = 0
    cpu_seconds: float = 0.0  # user + system of the whole compile tree
    units: UnitMemory = field(default_factory=UnitMemory)
    phase: str = "configure"  # of the last ninja status line
    first_step_at: float | None = None  # when ninja printed its first [n/N]


@dataclass(frozen=True, kw_only=True)
class EtaBasis:
    """What the ETA is computed from: an earlier build's CPU-seconds per unit, the jobs."""

    cpu_per_unit: float | None = None
    jobs: int = 1


def children_cpu_seconds() -> float:
    """User + system time of every finished child process (and theirs) of this process."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def process_table(proc: Path = Path("/proc")) -> list[Process]:
    table = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            rss_pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        table.append(
            Process(
                pid=int(entry.name),
                parent=int(fields[1]),
                name=name,
                rss_bytes=rss_pages * PAGE,
                started=int(fields[19]),
                # stat fields 14-17, counted after the command's ")"
                cpu_ticks=sum(int(value) for value in fields[11:15]),
            )
        )
    return table


def running(program: Path, table: Sequence[Process], proc: Path = Path("/proc")) -> list[int]:
    """The processes of `table` that run this executable (the kernel cuts names at 15 bytes)."""
    found = []
    for process in table:
        if process.name != program.name[:15]:
            continue
        with contextlib.suppress(OSError):
            if Path(os.readlink(proc / str(process.pid) / "exe")) == program.resolve():
                found.append(process.pid)
    return found


def descendants(root: int, table: Sequence[Process]) -> list[Process]:
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.parent, []).append(process)
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child.pid)
    return found


@dataclass
class MemoryGuard:
    """Stops the youngest compiler when memory is short; continues one when it is back."""

    margin_bytes: int
    resume_bytes: int
    paused: list[int] = field(default_factory=list)

    def step(self, available: int, tree: Sequence[Process]) -> str | None:
        running = [p for p in tree if p.name in COMPILERS and p.pid not in self.paused]
        if available < self.margin_bytes and len(running) > 1:
            youngest = max(running, key=lambda p: p.started)
            if send_signal(youngest.pid, signal.SIGSTOP):
                self.paused.append(youngest.pid)
                return (
                    f"memory low ({available / GIB:.1f} GiB available): paused "
                    f"{youngest.name} {youngest.pid} until others finish"
                )
        alive = {p.pid for p in tree}
        self.paused = [pid for pid in self.paused if pid in alive]
        if self.paused and available > self.resume_bytes:
            pid = self.paused.pop(0)
            send_signal(pid, signal.SIGCONT)
            return f"memory back ({available / GIB:.1f} GiB available): resumed {pid}"
        return None

    def release(self) -> None:
        for pid in self.paused:
            send_signal(pid, signal.SIGCONT)
        self.paused.clear()


def compile_logged(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: Path,
    guard: MemoryGuard,
    interval: float = 1.0,
    servers: Sequence[Path] = (),
    eta: EtaBasis = EtaBasis(),
) -> CompileStats:
    """Run the compile; show `[done/total] objects, minutes, memory`; keep the full log.

    `servers`: programs (sccache) whose processes run compilers for this compile; their
    compilers count in the memory figures and the guard pauses them as its own."""
    stats, started, cpu_before = CompileStats(), time.monotonic(), children_cpu_seconds()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", buffering=1) as handle:
        process = start_streaming(argv, env=env, cwd=cwd)
        reader = threading.Thread(target=_read_output, args=(process, handle, stats), daemon=True)
        reader.start()
        phases = Phases(folding=ci_folding())
        try:
            with _termination_as_interrupt():
                _watch(process, stats, guard, (started, interval, eta), servers, phases)
        except KeyboardInterrupt:
            guard.release()  # a stopped compiler would not see SIGTERM
            _stop(process)
            reporter.line(
                f"\ninterrupted: the build folder is kept, so the next run resumes ({log})"
            )
            raise
        finally:
            guard.release()
            reader.join(timeout=10)
            phases.end()
    stats.seconds = time.monotonic() - started
    stats.cpu_seconds = children_cpu_seconds() - cpu_before
    reporter.line(f"\n  {_progress(stats, started, eta)}")
    if process.returncode != 0:
        raise ProcessFailedError(
            f"the compile failed with exit code {process.returncode}; last lines of {log}:\n"
            f"{tail(log)}",
            hint=f"the full log is {log}; a rerun resumes where this one stopped",
        )
    return stats


def _read_output(process: subprocess.Popen[str], handle: object, stats: CompileStats) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        handle.write(line)  # type: ignore[attr-defined]
        match = NINJA_STEP.search(line)
        if match:
            stats.steps_done, stats.steps_total = int(match.group(1)), int(match.group(2))
            stats.phase = phase_of(line)
            stats.first_step_at = stats.first_step_at or time.monotonic()


def _watch(
    process: subprocess.Popen[str],
    stats: CompileStats,
    guard: MemoryGuard,
    timing: tuple[float, float, EtaBasis],
    servers: Sequence[Path],
    phases: Phases,
) -> None:
    started, interval, eta = timing
    last_print = 0.0
    tty = reporter.stream.isatty()
    phases.enter("configure")
    while process.poll() is None:
        time.sleep(interval)
        available = read_memory().usable_bytes
        table = process_table()
        # a compile server (sccache) runs the compilers outside the compile's own tree
        roots = [process.pid, *(pid for server in servers for pid in running(server, table))]
        tree = [p for root in roots for p in descendants(root, table)]
        in_use = sum(p.rss_bytes for p in tree)
        stats.peak_rss_bytes = max(stats.peak_rss_bytes, in_use)
        stats.min_available_bytes = min(available, stats.min_available_bytes or available)
        stats.units.sample(tree)
        message = guard.step(available, tree)
        if message:
            stats.pauses += message.startswith("memory low")
            reporter.line(f"\n  {message}")
        if stats.phase != phases.current and stats.first_step_at is not None:
            if tty:
                reporter.line()  # the live line stays above the group
            phases.enter(stats.phase)
        now = time.monotonic()
        if tty or now - last_print >= QUIET_INTERVAL:
            end = "\r" if tty else "\n"
            reporter.line(f"  {_progress(stats, started, eta, in_use)}", end=end)
            last_print = now


def _progress(stats: CompileStats, started: float, eta: EtaBasis, in_use: int | None = None) -> str:
    """`[kernels] 176/507 (35%), ETA 22 min, 12 min, in use 6.2 GiB, peak 9.1 GiB`."""
    now = time.monotonic()
    since = stats.first_step_at or now  # the pace counts from ninja's first unit, not configure
    left = eta_seconds(
        stats.steps_done, stats.steps_total, now - since,
        cpu_per_unit=eta.cpu_per_unit, jobs=eta.jobs,
    )  # fmt: skip
    using = f"in use {in_use / GIB:.1f} GiB, " if in_use is not None else ""
    return (
        f"[{stats.phase}] {counter(stats.steps_done, stats.steps_total, left)}, "
        f"{(now - started) / 60:.0f} min, {using}peak {stats.peak_rss_bytes / GIB:.1f} GiB"
    )


@contextlib.contextmanager
def _termination_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop the compile's whole process group, as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
