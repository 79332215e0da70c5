"""Rewriting a built wheel: drop requirements no offline install accepts, embed the manifest."""

from __future__ import annotations

import base64
import copy
import csv
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterable
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from toolchain.errors import DataFileError
from toolchain.util.datafile import parse_json
from toolchain.util.files import atomic_path

MANIFEST_NAME = "vllm_cpu_builder.json"
VERSION_LINE = re.compile(r"^Version:.*$", re.MULTILINE)
# PEP 427's components after its escaping (other characters become "_"), PEP 440's in the version:
# packaging's parser alone lets a build or platform tag hold any character, a newline included
WHEEL_NAME = re.compile(
    r"[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-[0-9][A-Za-z0-9_]*)?(-[A-Za-z0-9_.]+){3}\.whl"
)
FOLDED = re.compile(r"(?:\r\n|\r|\n)[ \t]*")  # a header continued on the next line (RFC 822)


def dist_info(names: Iterable[str]) -> str:
    folders = {name.split("/", 1)[0] for name in names if ".dist-info/" in name}
    if len(folders) != 1:
        raise ValueError(f"expected one .dist-info folder, found {sorted(folders)}")
    return folders.pop()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def drop_requirements(metadata: str, names: Iterable[str]) -> tuple[str, list[str]]:
    """METADATA without the Requires-Dist lines of `names`; and the lines removed."""
    wanted = {canonicalize_name(name) for name in names}
    kept, dropped = [], []
    for line in metadata.splitlines(keepends=True):
        if line.startswith("Requires-Dist:"):
            try:
                requirement = Requirement(line.split(":", 1)[1].strip())
            except InvalidRequirement:
                requirement = None
            if requirement is not None and canonicalize_name(requirement.name) in wanted:
                dropped.append(line.strip())
                continue
        kept.append(line)
    return "".join(kept), dropped


def rewrite_wheel(wheel: Path, *, drop: Iterable[str], manifest: dict[str, Any]) -> list[str]:
    """Rewrite `wheel` in place (atomically); returns the Requires-Dist lines dropped."""
    with zipfile.ZipFile(wheel) as source:
        info_dir = dist_info(source.namelist())
        metadata, dropped = drop_requirements(source.read(f"{info_dir}/METADATA").decode(), drop)
    replace_files(
        wheel,
        {
            f"{info_dir}/METADATA": metadata.encode(),
            f"{info_dir}/{MANIFEST_NAME}": json.dumps(manifest, indent=2, sort_keys=True).encode(),
        },
    )
    return dropped


def replace_files(wheel: Path, replaced: dict[str, bytes]) -> None:
    """Put `replaced` (archive name -> content) into `wheel` atomically, RECORD rewritten."""
    _copy_wheel(wheel, wheel, replaced)


def retag_wheel(
    source: Path, dest: Path, *, version: str, add: dict[str, bytes] | None = None
) -> None:
    """A copy of `source` at `dest` as `version`: the .dist-info folder renamed, METADATA's Version
    and RECORD rewritten, `add` (name -> content) put into the .dist-info. Written atomically."""
    with zipfile.ZipFile(source) as archive:
        old = dist_info(archive.namelist())
        metadata = archive.read(f"{old}/METADATA").decode()
    replaced = {
        f"{old}/METADATA": VERSION_LINE.sub(f"Version: {version}", metadata, count=1).encode(),
        **{f"{old}/{name}": data for name, data in (add or {}).items()},
    }
    _copy_wheel(source, dest, replaced, info_dir=f"{old.split('-', 1)[0]}-{version}.dist-info")


def _copy_wheel(
    source: Path, dest: Path, replaced: dict[str, bytes], *, info_dir: str | None = None
) -> None:
    """`source` copied to `dest` atomically (each member as it was, modes included), `replaced`
    (archive name -> content) put in, RECORD rewritten; with `info_dir`, the .dist-info renamed."""
    with zipfile.ZipFile(source) as archive:
        names = set(archive.namelist())
        old = dist_info(names)
        new = info_dir or old

        def renamed(name: str) -> str:
            return new + name[len(old) :] if name.startswith(f"{old}/") else name

        with (
            atomic_path(dest) as temporary,
            zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED) as target,
        ):
            records: list[tuple[str, str, str]] = []
            for item in archive.infolist():
                if item.filename == f"{old}/RECORD":
                    continue
                # a replaced member keeps its place and file mode (a library stays readable)
                data = replaced[item.filename] if item.filename in replaced else archive.read(item)
                member = copy.copy(item)
                member.filename = renamed(item.filename)
                target.writestr(member, data)
                records.append((member.filename, _record_hash(data), str(len(data))))
            for name, data in replaced.items():
                if name not in names:
                    target.writestr(renamed(name), data)
                    records.append((renamed(name), _record_hash(data), str(len(data))))
            records.append((f"{new}/RECORD", "", ""))
            target.writestr(f"{new}/RECORD", _csv_lines(records))


def _csv_lines(rows: Iterable[tuple[str, str, str]]) -> str:
    """RECORD is CSV: a file name with a comma in it must be quoted (vLLM ships such names)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def wheel_name_problem(filename: str) -> str | None:
    """Why `filename` is not a wheel file name as PEP 427 writes one; None when it is."""
    if not WHEEL_NAME.fullmatch(filename):
        return "not a wheel file name (PEP 427: NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl)"
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        return f"not a wheel file name ({exc})"
    return None


def check_wheel(wheel: Path) -> None:
    """A readable wheel: a valid file name, a zip with one .dist-info, its METADATA, a manifest
    (when there is one) that is a JSON object. DataFileError naming the file otherwise."""
    problem = wheel_name_problem(wheel.name)
    if problem is not None:
        shown = str(wheel) if str(wheel).isprintable() else repr(str(wheel))
        raise DataFileError(f"{shown}: {problem}")
    core_metadata(wheel)
    read_manifest(wheel)


def _read_member(wheel: Path, member: str | None) -> bytes | None:
    """A file inside the wheel (None: METADATA's folder only checked); errors name the wheel."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            info = dist_info(names)
            name = f"{info}/{member}"
            return archive.read(name) if name in names else None
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EOFError) as exc:
        raise DataFileError(f"{wheel}: not a readable wheel ({exc})") from exc


def read_manifest(wheel: Path) -> dict[str, Any] | None:
    """The manifest this toolkit embedded, or None for other wheels."""
    raw = _read_member(wheel, MANIFEST_NAME)
    if raw is None:
        return None
    data = parse_json(raw, where=f"{wheel}: {MANIFEST_NAME}")
    if not isinstance(data, dict):
        raise DataFileError(f"{wheel}: {MANIFEST_NAME} is not a JSON object")
    return data


def wheel_version(wheel: Path) -> str:
    return str(parse_wheel_filename(wheel.name)[1])


def metadata_version(wheel: Path) -> str:
    """The Version of the wheel's METADATA (`0.32.0+cpu.avx2`), not its file name's."""
    version = Parser().parsestr(core_metadata(wheel).decode(errors="replace")).get("Version")
    if not version:
        raise DataFileError(f"{wheel}: its METADATA has no Version")
    return str(version).strip()


def core_metadata(wheel: Path) -> bytes:
    """The wheel's METADATA file, as it is (what PEP 658 serves beside the wheel)."""
    metadata = _read_member(wheel, "METADATA")
    if metadata is None:
        raise DataFileError(f"{wheel}: no METADATA in its .dist-info folder")
    return metadata


def metadata_requirements(metadata: str) -> list[str]:
    """The Requires-Dist lines of a METADATA text; a folded one unfolded onto one line."""
    values = Parser().parsestr(metadata).get_all("Requires-Dist") or []
    return [FOLDED.sub(" ", str(value)) for value in values]


def requires_dist(wheel: Path) -> list[str]:
    return metadata_requirements(core_metadata(wheel).decode())
