"""Files written whole or not at all, hashed, and unpacked: what every stage uses."""

from __future__ import annotations

import fcntl
import glob
import gzip
import hashlib
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolchain.errors import BusyError, SourceError
from toolchain.util.report import reporter

CHUNK = 1 << 20
MARKER = ".vcb-unpacked"


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """A temporary path beside `final`, renamed onto it only if the block succeeds (and wrote it:
    a block that wrote nothing leaves `final` as it was)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.with_name(f".{final.name}.{os.getpid()}.part")
    try:
        yield temporary
        if temporary.exists():
            temporary.replace(final)
    finally:
        temporary.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_parts(final: Path) -> list[Path]:
    """Remove what runs killed while writing `final` left beside it (`.NAME.PID.part*` of a pid
    no longer running); a running writer's file is left alone. The removed paths."""
    pattern = re.compile(rf"\.{re.escape(final.name)}\.(\d+)\.part(\.tar)?")
    removed = []
    for path in final.parent.glob(f".{glob.escape(final.name)}.*.part*"):
        match = pattern.fullmatch(path.name)
        if match and int(match[1]) != os.getpid() and not _alive(int(match[1])):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tar_sha256(path: Path, *, named: Path | None = None) -> str:
    """sha256 of the uncompressed tar stream, whichever gzip wrote the archive; `named`: the name
    that says whether it is gzipped, when `path` is a temporary one."""
    digest = hashlib.sha256()
    opener: Any = gzip.open if (named or path).name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise _corrupt(path, exc) from exc
    return digest.hexdigest()


def _corrupt(archive: Path, exc: BaseException) -> SourceError:
    return SourceError(
        f"{archive} cannot be read as an archive ({exc}); nothing was unpacked",
        hint="replace it with a good copy (nox -s fetch-sources fills a mirror)",
    )


def _extract_data(tar: tarfile.TarFile, staging: Path) -> None:
    """Extract only what stays inside `staging`: tarfile's "data" filter where this Python has it
    (3.11.4 and newer); on older ones (Debian 12's python3 is 3.11.2) the same refusals by hand:
    absolute or `..` names, links leading outside, devices and other special files."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(staging, filter="data")
        return
    root = staging.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        if member.islnk():
            link = (root / member.linkname).resolve()
        elif member.issym():
            link = (target.parent / member.linkname).resolve()
        else:
            link = root
        inside = all(path == root or root in path.parents for path in (target, link))
        plain = member.isfile() or member.isdir() or member.issym() or member.islnk()
        if not inside or not plain:
            raise tarfile.TarError(
                f"refusing to unpack {member.name!r}: it would leave the folder "
                "or is not a plain file, folder or link"
            )
    tar.extractall(staging)


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
            _extract_data(tar, staging)
        tops = list(staging.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else staging
        (root / MARKER).write_text(stamp + "\n")
        root.replace(destination)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise _corrupt(archive, exc) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


@contextmanager
def file_lock(path: Path, *, what: str, wait: bool) -> Iterator[None]:
    """Hold an exclusive lock on `path` (made if missing). When another `what` holds it: wait,
    saying so, or refuse at once naming the holder's pid.

    The kernel releases the lock when its holder dies, so a killed run never blocks the next.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise BusyError(
                    f"another {what} is running in {path.parent} ({holder})",
                    hint="wait for it to finish, or use another --work-dir",
                ) from None
            reporter.detail(f"waiting for another {what} to finish ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
