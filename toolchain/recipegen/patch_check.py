"""Every shipped patch tried with `patch --dry-run` against the files of the new release."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toolchain.recipegen.sdist import SdistFiles
from toolchain.util import run


@dataclass(frozen=True, kw_only=True)
class DryRun:
    patch: Path
    applies: bool
    failures: tuple[str, ...]  # patch's lines about what failed: "Hunk #2 FAILED at 651."


def dry_run(patches: Iterable[Path], files: SdistFiles) -> list[DryRun]:
    """Each patch tried alone (as `apply-patches` applies it: -p1 --forward) on a fresh copy."""
    results = []
    for patch in patches:
        with tempfile.TemporaryDirectory(prefix="vcb-new-recipe-") as tree:
            _write_tree(Path(tree), files)
            done = run.capture(
                ["patch", "-p1", "--dry-run", "--forward", "--batch", "-i", patch.resolve()],
                cwd=Path(tree),
                check=False,
            )
        failures = _failures((done.stdout + done.stderr).splitlines())
        results.append(DryRun(patch=patch, applies=done.returncode == 0, failures=failures))
    return results


def _failures(output: list[str]) -> tuple[str, ...]:
    """patch's lines about what failed, each with the file it was checking. A file the tree
    lacks has no `checking file` line: patch quotes the diff's header after saying so."""
    current, missing = "", False
    found: list[str] = []
    for line in output:
        if line.startswith("checking file "):
            current = line.removeprefix("checking file ").strip()
        elif missing and line.startswith(("|--- ", "|+++ ")):
            current = line[5:].split("\t")[0].strip().partition("/")[2]  # -p1
            found.append(f"{current}: {found.pop()}")
            missing = False
        elif _is_failure(line):
            missing = "can't find file" in line
            found.append(line.strip() if missing or not current else f"{current}: {line.strip()}")
    return tuple(found)


def _write_tree(root: Path, files: SdistFiles) -> None:
    for path, text in files.files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _is_failure(line: str) -> bool:
    return any(
        word in line
        for word in ("FAILED", "can't find file", "Reversed (or previously applied)", "malformed")
    )
