"""`kernel-tests`: vLLM upstream's own CPU kernel tests (the release sdist's `tests/`) against one
wheel, or two wheels case by case, each installed in its own venv as `bench` installs it.

The same node ids run on both sides, in a fixed shuffled order, a chunk per pytest process: a
process of these tests grows to about 12 GB within 50 cases. The two sides of a chunk run side
by side, one thread each (OMP_NUM_THREADS=1); a process killed by a signal (the OOM killer)
runs once more alone, and a chunk that still writes no XML counts as no result, never a pass.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from packaging.version import InvalidVersion, Version

from toolchain.errors import ProcessFailedError, UsageError
from toolchain.runtime_deps import PipSources
from toolchain.util import run
from toolchain.util.files import file_lock, sha256_file, unpack_tar
from toolchain.util.report import duration, reporter
from toolchain.verify.bench import Side, prepare_side
from toolchain.verify.junit import MISSING, OUTCOMES, Case, read_junit
from toolchain.verify.kernel_tests_report import Difference, counts, differences, missing
from toolchain.verify.shadowing import check_shadowing
from toolchain.wheelfile import metadata_version

DEFAULT_FILES = (
    "tests/kernels/core/test_cpu_activation.py",
    "tests/kernels/attention/test_cpu_attn.py",
)
CHUNK_SIZE = 50
SEED = 32  # the shuffle is the same on every run, so a sample is the same cases every time
# beside the wheel; pytest 8.2 reads arguments from a file (@ids), so a chunk's command stays short
TEST_REQUIREMENTS = ("pytest>=8.2", "tblib")
COLLECT_TIMEOUT = 3600.0  # importing torch and vLLM, slow under emulation
POLL_SECONDS = 1.0
# node ids relative to the folder pytest runs in, whatever it finds there; no .pytest_cache
PYTEST_OPTIONS = ("--rootdir=.", "-p", "no:cacheprovider")


@dataclass(frozen=True, kw_only=True)
class KernelTestOptions:
    work_dir: Path
    wheels: tuple[Path, ...]  # A, and B when comparing
    sdist: Path  # the release's sdist, whose tests/ run
    files: tuple[str, ...] = DEFAULT_FILES
    sample: int | None = None  # about this many cases per file; None: every case
    chunk_size: int = CHUNK_SIZE
    sources: PipSources = field(default_factory=PipSources)


@dataclass(frozen=True, kw_only=True)
class Chunk:
    index: int  # from 1
    file: str
    node_ids: tuple[str, ...]


def release_of(wheels: Sequence[Path]) -> str:
    """The vLLM release the wheels were built from: METADATA's version without its local part
    (`0.32.0+cpu.avx2` -> `0.32.0`); two wheels of different releases have no common tests."""
    releases = {}
    for wheel in wheels:
        version = metadata_version(wheel)
        try:
            releases[wheel.name] = Version(version).public
        except InvalidVersion as exc:
            raise UsageError(f"{wheel}: its version {version!r} is not a version") from exc
    if len(set(releases.values())) > 1:
        shown = ", ".join(f"{name} is {release}" for name, release in releases.items())
        raise UsageError(
            f"the wheels are builds of different vLLM releases ({shown})",
            hint="compare two builds of one release: upstream's tests differ between releases",
        )
    return next(iter(releases.values()))


def sample_ids(node_ids: Sequence[str], sample: int | None, seed: int = SEED) -> list[str]:
    """The node ids in a fixed shuffled order (the same set gives the same order, whatever order
    it was collected in); with `sample`, every k-th of that order, so at most `sample` remain."""
    shuffled = sorted(node_ids)
    random.Random(seed).shuffle(shuffled)
    if sample is None or sample >= len(shuffled):
        return shuffled
    step = -(-len(shuffled) // sample)  # ceiling: len / step <= sample
    return shuffled[::step]


def plan_chunks(
    collected: Mapping[str, Sequence[str]], *, sample: int | None, size: int
) -> list[Chunk]:
    """Each file's (sampled) node ids, `size` per chunk, numbered across the files."""
    chunks: list[Chunk] = []
    for file, node_ids in collected.items():
        chosen = sample_ids(node_ids, sample)
        for start in range(0, len(chosen), size):
            part = tuple(chosen[start : start + size])
            chunks.append(Chunk(index=len(chunks) + 1, file=file, node_ids=part))
    return chunks


def unpack_tests(sdist: Path, destination: Path) -> Path:
    """The sdist's tests/ alone under `destination` (reused while the sdist is the same), a
    folder pytest runs from with nothing that Python would import as vllm."""
    root = unpack_tar(sdist, destination, stamp=sha256_file(sdist), only="tests")
    if not (root / "tests").is_dir():
        raise UsageError(f"{sdist.name} has no tests/ folder", hint="give vLLM's release sdist")
    shadows = [shadow for shadow in check_shadowing(root) if shadow.wins]
    if shadows:
        raise UsageError(
            f"{shadows[0]}: the tests would import it instead of the wheel's vLLM",
            hint="unset PYTHONPATH, or remove that folder from it",
        )
    return root


def one_thread_env(environ: Mapping[str, str]) -> dict[str, str]:
    """One thread per process: two sides run side by side, and the figures are comparable."""
    return {**environ, "OMP_NUM_THREADS": "1"}


def install_test_requirements(python: Path, sources: PipSources, log: Path) -> None:
    pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    argv = [*pip, *sources.args(torch=False), *TEST_REQUIREMENTS]
    run.run_logged(argv, log=log, what="installing pytest")


def parse_collected(stdout: str, files: Sequence[str]) -> dict[str, list[str]]:
    """The node ids `pytest --collect-only -q` printed, by the file each belongs to."""
    found: dict[str, list[str]] = {file: [] for file in files}
    for line in stdout.splitlines():
        file = line.partition("::")[0]
        if "::" in line and file in found:
            found[file].append(line.strip())
    return found


def normalized_files(given: Sequence[str]) -> tuple[str, ...]:
    """--file paths as pytest names them in node ids (`./tests/x.py` -> `tests/x.py`), each
    once: a path written otherwise would match none of the ids pytest collects for it."""
    files = []
    for file in given:
        path = PurePosixPath(file)
        if path.is_absolute() or ".." in path.parts:
            raise UsageError(
                f"--file {file}: not a path inside the sdist",
                hint="give it relative to the sdist's top folder, such as tests/kernels/...",
            )
        files.append(path.as_posix())
    return tuple(dict.fromkeys(files))


def check_files(root: Path, files: Sequence[str]) -> None:
    """Every test file is one of the sdist's (before the venvs are made, minutes of work)."""
    missing_files = [file for file in files if not (root / file).is_file()]
    if missing_files:
        raise UsageError(
            f"the release's sdist has no {', '.join(missing_files)}",
            hint=f"give --file a path under tests/ as it is in the sdist (in {root})",
        )


def collect(python: Path, root: Path, files: Sequence[str], log: Path) -> dict[str, list[str]]:
    """Every node id of `files`, as pytest collects them in the venv of `python`."""
    argv: list[str | Path] = [python, "-m", "pytest", "--collect-only", "-q", *PYTEST_OPTIONS]
    argv += files
    run.announce(argv)
    output = run.capture(
        argv, timeout=COLLECT_TIMEOUT, check=False, cwd=root, env=one_thread_env(os.environ)
    )
    with log.open("a") as handle:
        handle.write(f"\n+ {' '.join(map(str, argv))}\n{output.stdout}{output.stderr}")
    found = parse_collected(output.stdout, files)
    if output.returncode != 0 or not any(found.values()):
        last = (output.stdout + output.stderr).strip().splitlines()[-5:]
        raise ProcessFailedError(
            f"pytest could not collect the tests (exit {output.returncode}): " + " | ".join(last),
            hint=f"read {log}",
        )
    for file, node_ids in found.items():
        reporter.detail(f"{file}: {len(node_ids)} cases")
    return found


class Process(Protocol):
    pid: int

    def wait(self) -> int: ...

    def poll(self) -> int | None: ...


# starts one pytest process: (argv, log, env, cwd) -> the process
Start = Callable[[Sequence[str | Path], Path, Mapping[str, str], Path], Process]


def start_logged(
    argv: Sequence[str | Path], log: Path, env: Mapping[str, str], cwd: Path
) -> Process:
    return run.start_logged(argv, log=log, env=env, cwd=cwd)


@dataclass(frozen=True, kw_only=True)
class ChunkRun:
    """One side's pytest process of one chunk: how it ended and the outcome of each case."""

    side: str
    chunk: int
    returncode: int
    seconds: float
    log: Path
    cases: dict[str, Case] | None  # None: it wrote no readable XML

    @property
    def killed(self) -> bool:
        return self.returncode < 0

    def summary(self) -> str:
        if self.cases is None:
            how = (
                f"killed by {signal.Signals(-self.returncode).name}"
                if self.killed and -self.returncode in signal.valid_signals()
                else f"exit {self.returncode}"
            )
            return f"{self.side}: no results ({how}), {duration(self.seconds)}"
        tally = {o: sum(c.outcome == o for c in self.cases.values()) for o in OUTCOMES}
        shown = " ".join(f"{n} {o}" for o, n in tally.items() if n) or "no cases"
        return f"{self.side}: {shown}, {duration(self.seconds)}"


def pytest_argv(python: Path, ids_file: Path, xml: Path) -> list[str | Path]:
    return [python, "-m", "pytest", "-q", *PYTEST_OPTIONS, f"--junitxml={xml}", f"@{ids_file}"]


def wait_all(running: Mapping[str, tuple[Process, float]]) -> dict[str, tuple[int, float]]:
    """(exit status, seconds) of each process, each timed to its own end."""
    ended: dict[str, tuple[int, float]] = {}
    while True:
        for label, (process, since) in running.items():
            code = process.poll() if label not in ended else None
            if code is not None:
                ended[label] = (code, time.monotonic() - since)
        if len(ended) == len(running):
            return ended
        time.sleep(POLL_SECONDS)


def run_sides(
    chunk: Chunk, sides: Sequence[Side], folder: Path, root: Path, start: Start
) -> dict[str, ChunkRun]:
    """The chunk's pytest process of each side, side by side; each side's outcome."""
    folder.mkdir(parents=True, exist_ok=True)
    ids_file = folder / f"chunk-{chunk.index:03d}.txt"
    ids_file.write_text("".join(f"{node_id}\n" for node_id in chunk.node_ids))
    running: dict[str, tuple[Process, float]] = {}
    paths = {side.label: folder / f"{side.label.lower()}-{chunk.index:03d}" for side in sides}
    try:
        for side in sides:
            xml = paths[side.label].with_suffix(".xml")
            xml.unlink(missing_ok=True)  # an earlier run's results are not this run's
            log = paths[side.label].with_suffix(".log")
            argv = pytest_argv(side.python, ids_file, xml)
            running[side.label] = (
                start(argv, log, one_thread_env(os.environ), root),
                time.monotonic(),
            )
        ended = wait_all(running)
    finally:
        for process, _ in running.values():
            if process.poll() is None:  # interrupted: no test process is left behind
                run.send_signal(process.pid, signal.SIGKILL, group=True)
    return {
        label: ChunkRun(
            side=label,
            chunk=chunk.index,
            returncode=code,
            seconds=seconds,
            log=paths[label].with_suffix(".log"),
            cases=read_junit(paths[label].with_suffix(".xml"), chunk.node_ids),
        )
        for label, (code, seconds) in ended.items()
    }


def run_chunk(
    chunk: Chunk, sides: Sequence[Side], folder: Path, root: Path, start: Start
) -> dict[str, ChunkRun]:
    """Both sides of a chunk; a side killed by a signal once more, alone (memory for one)."""
    runs = run_sides(chunk, sides, folder, root, start)
    for side in sides:
        if runs[side.label].killed:
            reporter.warning(
                f"[chunk {chunk.index}] {runs[side.label].summary()}: out of memory? "
                "running it again alone"
            )
            runs.update(run_sides(chunk, [side], folder, root, start))
    return runs


def run_all(
    chunks: Sequence[Chunk], sides: Sequence[Side], folder: Path, root: Path, start: Start
) -> list[dict[str, ChunkRun]]:
    found = []
    for chunk in chunks:
        runs = run_chunk(chunk, sides, folder, root, start)
        found.append(runs)
        shown = "; ".join(runs[side.label].summary() for side in sides)
        reporter.outcome(f"[chunk {chunk.index}/{len(chunks)}] {shown}")
    return found


@dataclass(frozen=True, kw_only=True)
class KernelTestResult:
    sides: tuple[Side, ...]
    release: str
    sdist: str
    files: tuple[str, ...]
    sample: int | None
    chunk_size: int
    node_ids: tuple[str, ...]  # every case that ran, in the order it ran
    outcomes: dict[str, dict[str, Case]]  # by side, then node id
    unfinished: tuple[ChunkRun, ...]  # processes that wrote no results, even alone
    seconds: float

    @property
    def differences(self) -> list[Difference]:
        return differences(self.node_ids, self.outcomes)

    @property
    def complete(self) -> bool:
        return not any(missing(self.node_ids, self.outcomes).values())

    @property
    def agree(self) -> bool:
        """Every case has a result on every side, the same one."""
        return self.complete and not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "sides": {side.label: side.name for side in self.sides},
            "vllm": self.release,
            "sdist": self.sdist,
            "files": list(self.files),
            "sample": self.sample,
            "seed": SEED,
            "chunk_size": self.chunk_size,
            "seconds": round(self.seconds, 1),
            "agree": self.agree,
            "counts": {
                label: counts(self.node_ids, cases) for label, cases in self.outcomes.items()
            },
            "missing": missing(self.node_ids, self.outcomes),
            "differences": [difference.to_json() for difference in self.differences],
            "unfinished_chunks": [
                {"side": r.side, "chunk": r.chunk, "returncode": r.returncode, "log": str(r.log)}
                for r in self.unfinished
            ],
            "cases": [
                {"node_id": n, **{label: c[n].outcome for label, c in self.outcomes.items()}}
                for n in self.node_ids
            ],
        }


def outcomes_of(
    runs: Sequence[Mapping[str, ChunkRun]], chunks: Sequence[Chunk]
) -> dict[str, dict[str, Case]]:
    """Each side's outcome of every case; MISSING for those of a chunk with no results."""
    found: dict[str, dict[str, Case]] = {}
    for chunk, by_side in zip(chunks, runs, strict=True):
        for label, result in by_side.items():
            cases = result.cases or dict.fromkeys(chunk.node_ids, MISSING)
            found.setdefault(label, {}).update(cases)
    return found


def kernel_tests(options: KernelTestOptions, start: Start | None = None) -> KernelTestResult:
    """Unpack the tests, install each wheel, collect on A, run every chunk on every side."""
    started = time.monotonic()
    folder = options.work_dir / "kernel-tests"
    with file_lock(folder / ".kernel-tests.lock", what="kernel-tests", wait=False):
        log = folder / "kernel-tests.log"
        log.unlink(missing_ok=True)
        release = release_of(options.wheels)
        root = unpack_tests(options.sdist, folder / "sources" / f"vllm-{release}")
        check_files(root, options.files)
        sides = []
        for label, wheel in zip("AB", options.wheels, strict=False):
            side = prepare_side(label, str(wheel), folder / label.lower(), options.sources, log)
            install_test_requirements(side.python, options.sources, log)
            sides.append(side)
        reporter.heading(f"collecting {len(options.files)} test file(s) in A's venv")
        collected = collect(sides[0].python, root, options.files, log)
        chunks = plan_chunks(collected, sample=options.sample, size=options.chunk_size)
        cases = sum(len(chunk.node_ids) for chunk in chunks)
        reporter.heading(
            f"kernel-tests: {cases} cases in {len(chunks)} chunks of up to {options.chunk_size}, "
            f"{' and '.join(side.label for side in sides)} side by side (logs: {folder / 'chunks'})"
        )
        runs = run_all(chunks, sides, folder / "chunks", root, start or start_logged)
    return KernelTestResult(
        sides=tuple(sides),
        release=release,
        sdist=options.sdist.name,
        files=options.files,
        sample=options.sample,
        chunk_size=options.chunk_size,
        node_ids=tuple(n for chunk in chunks for n in chunk.node_ids),
        outcomes=outcomes_of(runs, chunks),
        unfinished=tuple(r for by_side in runs for r in by_side.values() if r.cases is None),
        seconds=time.monotonic() - started,
    )
