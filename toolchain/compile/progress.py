"""What the compile shows while it runs: the phase, n/N with percent and an ETA; in CI one folded
group (GitHub Actions) or collapsed section (GitLab) per phase, and a table of the build in
GitHub's step summary.

Phases follow ninja's status lines: configure until the first `[n/N]`, then oneDNN's units, the
kernels, and the link; repair is the build step after the compile. A phase only moves forward
(ninja interleaves oneDNN and kernel units), so each is one group. The ETA comes from an earlier
build's CPU-seconds per unit (its manifest in the wheel folder, same vLLM and target) spread over
the plan's jobs; the first build falls back to the time per unit so far.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.plan.earlier import EarlierBuild
from toolchain.util.report import duration, reporter

PHASES = ("configure", "oneDNN", "kernels", "link", "repair")
ONEDNN = re.compile(r"onednn|dnnl", re.IGNORECASE)
QUIET_INTERVAL = 30.0  # seconds between progress lines when the output is not a terminal


def phase_of(line: str) -> str:
    """The phase a ninja status line (`[n/N] ...`) belongs to."""
    if "Linking" in line:
        return "link"
    return "oneDNN" if ONEDNN.search(line) else "kernels"


GITLAB_SECTION_NAME = re.compile(r"[^A-Za-z0-9_.-]")  # what GitLab's section names may hold
CLEAR = "\x1b[0K"  # erase to the end of the line: GitLab's marker lines do not show


@dataclass(frozen=True)
class Folding:
    """How the CI log folds a stretch of lines: GitHub Actions' `::group::`, GitLab's collapsed
    sections (`section_start:TS:NAME[collapsed=true]`, as GitLab's job-log docs give them), or
    nothing outside CI. `clock` gives the sections' Unix time stamps."""

    ci: str = ""  # "github", "gitlab" or ""
    clock: Callable[[], float] = time.time

    def start(self, header: str) -> None:
        if self.ci == "github":
            reporter.line(f"::group::{header}")
        elif self.ci == "gitlab":
            stamp, name = int(self.clock()), self._name(header)
            reporter.line(f"{CLEAR}section_start:{stamp}:{name}[collapsed=true]\r{CLEAR}{header}")

    def end(self, header: str) -> None:
        if self.ci == "github":
            reporter.line("::endgroup::")
        elif self.ci == "gitlab":
            reporter.line(f"{CLEAR}section_end:{int(self.clock())}:{self._name(header)}\r{CLEAR}")

    @staticmethod
    def _name(header: str) -> str:
        return GITLAB_SECTION_NAME.sub("_", header.replace(": ", "_"))


def ci_folding(env: Mapping[str, str] = os.environ) -> Folding:
    """The folding of the CI this runs in, from the variables each CI sets in every job."""
    if env.get("GITHUB_ACTIONS") == "true":
        return Folding(ci="github")
    if env.get("GITLAB_CI") == "true":
        return Folding(ci="gitlab")
    return Folding()


@dataclass
class Phases:
    """The compile's current phase, each folded in the CI's log (one group or section each)."""

    folding: Folding
    current: str | None = None

    def enter(self, phase: str) -> None:
        if self.current is not None and PHASES.index(phase) <= PHASES.index(self.current):
            return
        self.end()
        self.current = phase
        self.folding.start(f"compile: {phase}")

    def end(self) -> None:
        if self.current is not None:
            self.folding.end(f"compile: {self.current}")


@contextlib.contextmanager
def ci_group(header: str) -> Iterator[None]:
    """A folded group (GitHub Actions) or collapsed section (GitLab) around a step."""
    folding = ci_folding()
    folding.start(header)
    try:
        yield
    finally:
        folding.end(header)


def learned_cpu_per_unit(builds: Iterable[EarlierBuild]) -> float | None:
    """CPU-seconds per compile unit of the newest of these earlier builds (plan/earlier.py)."""
    best: tuple[str, float] | None = None
    for build in builds:
        cpu, steps = build.figure("compile", "cpu_seconds"), build.figure("compile", "steps")
        if cpu is None or steps is None or cpu <= 0 or steps <= 0:
            continue  # a manifest without the figures teaches nothing
        if best is None or build.created > best[0]:
            best = (build.created, cpu / steps)
    return best[1] if best else None


def eta_seconds(
    done: int, total: int, elapsed: float, *, cpu_per_unit: float | None, jobs: int
) -> float | None:
    """Seconds left: learned CPU-seconds per unit over the jobs, else the pace so far."""
    if total <= 0 or done >= total:
        return 0.0 if total > 0 else None
    left = total - done
    if cpu_per_unit is not None:
        return left * cpu_per_unit / max(jobs, 1)
    return elapsed / done * left if done > 0 else None


def counter(done: int, total: int, eta: float | None) -> str:
    """`176/507 (35%), ETA 22 min`."""
    if total <= 0:
        return f"{done}/?"
    left = f", ETA {duration(eta)}" if eta is not None else ""
    return f"{done}/{total} ({100 * done // total}%){left}"


def step_summary(rows: dict[str, Any]) -> None:
    """Append the build's table to $GITHUB_STEP_SUMMARY, when GitHub Actions gives one."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    names = list(rows)
    table = [
        "| " + " | ".join(names) + " |",
        "| " + " | ".join("---" for _ in names) + " |",
        "| " + " | ".join(str(rows[name]) for name in names) + " |",
    ]
    with Path(path).open("a") as handle:
        handle.write("\n".join(table) + "\n\n")


def cache_hit_rate(cache: dict[str, Any] | None) -> str:
    """`87% (412 of 474)`, or what kept the cache from counting."""
    if not cache or not cache.get("used"):
        return "no shared cache"
    hits, misses = int(cache.get("hits") or 0), int(cache.get("misses") or 0)
    if hits + misses == 0:
        return "no lookups"
    return f"{100 * hits // (hits + misses)}% ({hits} of {hits + misses})"
