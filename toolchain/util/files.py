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


def disk_bytes(folder: Path) -> int:
    """What the files under `folder` take on the disk (blocks, not lengths); links not followed,
    files that vanish while counting skipped."""
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


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


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _refuse(member: str, why: str) -> tarfile.TarError:
    return tarfile.TarError(f"refusing to unpack {member!r}: {why}")


def _check_member(member: tarfile.TarInfo, root: Path) -> None:
    """`member` lands inside `root`, and so does the link it makes, resolved through what is on
    disk now: the links unpacked before it included (a chain of links each harmless alone)."""
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise _refuse(member.name, "not a plain file, folder or link")
    target = root / member.name
    places = [target.parent.resolve() / target.name if member.issym() else target.resolve()]
    if member.issym():
        places.append((target.parent.resolve() / member.linkname).resolve())
    elif member.islnk():
        places.append((root / member.linkname).resolve())
    if not all(_inside(place, root) for place in places):
        raise _refuse(member.name, "it would leave the folder")


def _leads_out(link: Path, root: Path) -> bool:
    try:
        return not _inside(link.resolve(), root)
    except (OSError, RuntimeError):  # a loop of links
        return True


def _check_links(root: Path) -> None:
    """No link in the unpacked tree leads out of it: a link made later can change where an
    earlier one leads, and the build would follow it."""
    for folder, dirs, files in os.walk(root):
        for path in (Path(folder) / name for name in (*dirs, *files)):
            if path.is_symlink() and _leads_out(path, root):
                raise _refuse(str(path.relative_to(root)), "a link that leads out of the folder")


def _under(member: tarfile.TarInfo, folder: str) -> bool:
    """Whether `member` is `folder` or inside it, below the archive's top folder."""
    inner = member.name.removeprefix("./").partition("/")[2]
    return inner == folder or inner.startswith(folder + "/")


def _extract_data(tar: tarfile.TarFile, staging: Path, only: str = "") -> None:
    """Extract only what stays inside `staging`, one member at a time, each checked against what
    is already on disk, then every link checked once more; tarfile's "data" filter besides where
    this Python has it (3.11.4 and newer; Debian 12's python3 is 3.11.2), as a second line.
    `only`: a folder below the top one, the only part extracted."""
    root = staging.resolve()
    with_filter = hasattr(tarfile, "data_filter")
    for member in tar.getmembers():
        if only and not _under(member, only):
            continue
        _check_member(member, root)
        if with_filter:
            tar.extract(member, staging, set_attrs=not member.isdir(), filter="data")
        else:
            tar.extract(member, staging, set_attrs=not member.isdir())
    _check_links(root)


def unpack_tar(archive: Path, destination: Path, *, stamp: str, only: str = "") -> Path:
    """Unpack an archive's single top folder as `destination`; reuse it if `stamp` matches.
    `only`: a folder below the top one (`tests`), the only part unpacked."""
    marker = destination / MARKER
    if marker.is_file() and marker.read_text().strip() == stamp:
        return destination
    shutil.rmtree(destination, ignore_errors=True)
    staging = destination.with_name(f".{destination.name}.{os.getpid()}.part")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            _extract_data(tar, staging, only)
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
