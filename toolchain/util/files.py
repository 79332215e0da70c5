"""Files written whole or not at all, hashed, and unpacked: what every stage uses."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


MARKER = ".vcb-unpacked"


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path beside `final`, renamed onto it only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.with_name(f".{final.name}.{os.getpid()}.part")
    try:
        yield temporary
        temporary.replace(final)
    finally:
        temporary.unlink(missing_ok=True)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tar_sha256(path: Path) -> str:
    """sha256 of the uncompressed tar stream, whichever gzip wrote the archive."""
    digest = hashlib.sha256()
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def unpack_tar(archive: Path, destination: Path, *, stamp: str) -> Path:
    """Unpack an archive's single top folder as `destination`; reuse it if `stamp` matches."""
    marker = destination / MARKER
    if marker.is_file() and marker.read_text().strip() == stamp:
        return destination
    shutil.rmtree(destination, ignore_errors=True)
    staging = destination.with_name(f".{destination.name}.{os.getpid()}.part")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        tops = list(staging.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else staging
        (root / MARKER).write_text(stamp + "\n")
        root.replace(destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination
