"""`bench`: one wheel against another on the same generation, each installed in its own venv as
verify installs it, interleaved A/B over rounds so that the machine's drift (other jobs, a
hypervisor, thermal state) weighs on both sides alike.

Each run is a fresh engine (verify's generate script) with a fixed KV cache: a warm-up of each
shape, then the timed batch and single-prompt generations, in fp32 and in bf16.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.errors import ProcessFailedError
from toolchain.runtime_deps import PipSources
from toolchain.util import run
from toolchain.util.files import file_lock
from toolchain.util.report import reporter
from toolchain.verify.bench_report import Measurement, render, summarize
from toolchain.verify.context import tiny_model
from toolchain.verify.engine_checks import SCRIPTS, marked, root_error
from toolchain.verify.environment import create_env
from toolchain.verify.server import scratch

DTYPES = ("float32", "bfloat16")
PROMPTS = {"batch": 32, "single": 1}
MAX_TOKENS = 128
KV_CACHE_BYTES = 1 << 30  # the same small cache for every run: fast to start, nothing to tune
RUN_TIMEOUT = 900.0


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    work_dir: Path
    wheel: Path
    against: str = ""  # a wheel file, or a requirement pip downloads
    rounds: int = 3
    model: Path | None = None
    sources: PipSources = field(default_factory=PipSources)


@dataclass(frozen=True, kw_only=True)
class Side:
    label: str  # "A" or "B"
    name: str  # what the user gave: the wheel's file name or the requirement
    python: Path


@dataclass(frozen=True, kw_only=True)
class Run:
    round: int
    side: str
    dtype: str


def schedule(sides: Sequence[str], dtypes: Sequence[str], rounds: int) -> list[Run]:
    """Every side in every dtype each round; odd rounds take the sides in reverse (A B, B A, ...)
    so neither side always runs first, on a cooler or a busier machine."""
    runs = []
    for number in range(1, rounds + 1):
        order = list(sides) if number % 2 else list(reversed(sides))
        runs += [Run(round=number, side=side, dtype=dtype) for dtype in dtypes for side in order]
    return runs


def measure_all(
    runs: Sequence[Run], measure: Callable[[Run], dict[str, float]]
) -> list[Measurement]:
    """Each run in order, its tok/s by shape, with a line per run as it ends."""
    found = []
    for index, item in enumerate(runs, start=1):
        rates = measure(item)
        found.append(
            Measurement(round=item.round, side=item.side, dtype=item.dtype, tokens_per_second=rates)
        )
        figures = ", ".join(f"{shape} {rate:.1f} tok/s" for shape, rate in rates.items())
        reporter.outcome(
            f"[{index}/{len(runs)}] round {item.round} {item.side} {item.dtype}: {figures}"
        )
    return found


def engine_argv(python: Path, model: Path, dtype: str) -> list[str | Path]:
    return [
        python, SCRIPTS / "generate_check.py", model,
        "--prompts", *map(str, PROMPTS.values()), "--max-tokens", str(MAX_TOKENS),
        "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--dtype", dtype, "--warmup",
    ]  # fmt: skip


def rates_of(report: dict[str, Any]) -> dict[str, float]:
    """tok/s by shape from generate_check.py's RESULT report."""
    by_count = {r["prompts"]: r["tokens_per_second"] for r in report.get("runs", [])}
    return {
        shape: float(by_count[count]) for shape, count in PROMPTS.items() if by_count.get(count)
    }


def run_engine(python: Path, model: Path, dtype: str, log: Path) -> dict[str, float]:
    """One fresh engine: warm-up, then the timed generations; tok/s by shape."""
    argv = engine_argv(python, model, dtype)
    with scratch(os.environ) as place:
        run.announce(argv)
        output = run.capture(
            argv, timeout=RUN_TIMEOUT, check=False, cwd=place.folder, env=place.env
        )
    with log.open("a") as handle:
        handle.write(f"\n+ {shlex.join(map(str, argv))}\n{output.stdout}{output.stderr}")
    rates = rates_of(marked(output.stdout, "RESULT "))
    if output.returncode != 0 or set(rates) != set(PROMPTS):
        raise ProcessFailedError(
            f"the {dtype} generation failed (exit {output.returncode}): "
            + root_error(output.stdout + output.stderr),
            hint=f"read {log}",
        )
    return rates


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    sides: tuple[Side, ...]
    rounds: int
    measurements: tuple[Measurement, ...]
    model: Path
    seconds: float

    def table(self) -> str:
        shapes = {"batch": f"{PROMPTS['batch']}", "single": f"{PROMPTS['single']}"}
        return render(summarize(self.measurements, DTYPES), shapes=shapes)

    def to_json(self) -> dict[str, Any]:
        return {
            "sides": {side.label: side.name for side in self.sides},
            "rounds": self.rounds,
            "model": str(self.model),
            "max_tokens": MAX_TOKENS,
            "prompts": PROMPTS,
            "kv_cache_bytes": KV_CACHE_BYTES,
            "seconds": round(self.seconds, 1),
            "cells": [cell.to_json() for cell in summarize(self.measurements, DTYPES)],
            "runs": [
                {"round": m.round, "side": m.side, "dtype": m.dtype, **m.tokens_per_second}
                for m in self.measurements
            ],
        }


def bench(options: BenchOptions) -> BenchResult:
    """Install each side, make the model, run the interleaved rounds (one bench per work dir)."""
    started = time.monotonic()
    folder = options.work_dir / "bench"
    with file_lock(folder / ".bench.lock", what="bench", wait=False):
        log = folder / "bench.log"
        log.unlink(missing_ok=True)
        specs = {"A": str(options.wheel), **({"B": options.against} if options.against else {})}
        sides = tuple(
            prepare_side(label, spec, folder / label.lower(), options.sources, log)
            for label, spec in specs.items()
        )
        model = options.model or tiny_model(sides[0].python, folder / "tiny-model", log)
        pythons = {side.label: side.python for side in sides}
        runs = schedule(list(pythons), DTYPES, options.rounds)
        reporter.heading(f"bench: {len(runs)} engine runs, interleaved (log: {log})")
        found = measure_all(
            runs, lambda item: run_engine(pythons[item.side], model, item.dtype, log)
        )
    return BenchResult(
        sides=sides,
        rounds=options.rounds,
        measurements=tuple(found),
        model=model,
        seconds=time.monotonic() - started,
    )


def prepare_side(label: str, spec: str, folder: Path, sources: PipSources, log: Path) -> Side:
    """A new venv in `folder` with the wheel `spec`, or the wheel pip downloads for it."""
    wheel = Path(spec)
    if not wheel.is_file():
        wheel = download(spec, folder / "download", log)
    venv = folder / "venv"
    reporter.heading(f"{label}: {wheel.name} into a new venv at {venv}")
    create_env(wheel, venv, sources, log)
    name = wheel.name if Path(spec).is_file() else spec  # the requirement, as the user gave it
    return Side(label=label, name=name, python=venv / "bin" / "python")


def download(requirement: str, dest: Path, log: Path) -> Path:
    """The wheel pip picks for `requirement` with its own configuration (index, find-links)."""
    shutil.rmtree(dest, ignore_errors=True)  # the wheel of an earlier run may be another version
    dest.mkdir(parents=True)
    run.run_logged(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
         "--dest", dest, requirement],
        log=log,
        what=f"downloading {requirement}",
    )  # fmt: skip
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ProcessFailedError(f"pip download {requirement} gave {[w.name for w in wheels]}")
    return wheels[0]
