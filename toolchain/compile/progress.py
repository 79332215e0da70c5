"""What the compile shows while it runs: the phase, n/N with percent and an ETA; in GitHub Actions
one folded group per phase, and a table of the build in the job's step summary.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError
from toolchain.util.datafile import parse_json
from toolchain.util.report import duration, reporter

PHASES = ("configure", "oneDNN", "kernels", "link", "repair")
ONEDNN = re.compile(r"onednn|dnnl", re.IGNORECASE)
QUIET_INTERVAL = 30.0  # seconds between progress lines when the output is not a terminal


def phase_of(line: str) -> str:
    """The phase a ninja status line (`[n/N] ...`) belongs to."""
    if "Linking" in line:
        return "link"
    return "oneDNN" if ONEDNN.search(line) else "kernels"


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


@dataclass
class Phases:
    """The compile's current phase; a GitHub Actions group per phase when `fold`."""

    fold: bool
    current: str | None = None

    def enter(self, phase: str) -> None:
        if self.current is not None and PHASES.index(phase) <= PHASES.index(self.current):
            return
        self.end()
        self.current = phase
        if self.fold:
            reporter.line(f"::group::compile: {phase}")

    def end(self) -> None:
        if self.fold and self.current is not None:
            reporter.line("::endgroup::")


@contextlib.contextmanager
def github_group(name: str) -> Iterator[None]:
    """A folded group in GitHub Actions' log around a step; nothing elsewhere."""
    fold = in_github_actions()
    if fold:
        reporter.line(f"::group::{name}")
    try:
        yield
    finally:
        if fold:
            reporter.line("::endgroup::")


def learned_cpu_per_unit(wheel_dir: Path, vllm_version: str, target: str) -> float | None:
    """CPU-seconds per compile unit of the newest earlier build of this vLLM and target."""
    best: tuple[str, float] | None = None
    for path in wheel_dir.glob("*.manifest.json"):
        try:
            record = parse_json(path.read_text(), where=str(path))

            compiled = record["compile"]
            per_unit = float(compiled["cpu_seconds"]) / int(compiled["steps"])
            key = (record["vllm_version"], record["target_isa"])
            created = str(record["created"])
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, DataFileError):
            continue  # a manifest without the figures teaches nothing
        if key == (vllm_version, target) and per_unit > 0 and (best is None or created > best[0]):
            best = (created, per_unit)
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
