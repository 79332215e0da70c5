"""Trust on first use for a third-party source whose hash no recipe records yet.

The first archive used from a mirror folder is hashed and its tar sha256 written to
`sources.lock.json` in that folder; every later use of the folder checks against it. The recipe's
own `tar_sha256`, where present, always decides instead.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolchain.errors import DataFileError, SourceError
from toolchain.util.datafile import load_json
from toolchain.util.files import atomic_path, file_lock
from toolchain.util.report import reporter

LOCK_NAME = "sources.lock.json"
LOCK_KEYS = {"name", "ref", "tar_sha256", "recorded"}


def read_lock(folder: Path) -> dict[str, dict[str, str]]:
    """archive name -> what was recorded on first use; {} when there is no lock yet."""
    path = folder / LOCK_NAME
    if not path.is_file():
        return {}
    data: Any = load_json(path)
    entries = data.get("archives") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(
        isinstance(entry, dict)
        and set(entry) == LOCK_KEYS
        and all(isinstance(value, str) for value in entry.values())
        for entry in entries.values()
    ):
        raise DataFileError(
            f'{path}: expected {{"archives": {{ARCHIVE: {{{", ".join(sorted(LOCK_KEYS))}}}}}}}',
            hint="delete it to record the hashes anew from archives you trust",
        )
    return entries


def check_archive(
    *,
    name: str,
    ref: str,
    archive: Path,
    recipe_sha256: str | None,
    found: str,
    recipe: str,
    shown: str | None = None,
) -> str:
    """Check `found` (the archive's tar sha256) against the recipe, or else the folder's lock,
    recording it there on first use. Returns how it was checked; raises SourceError on a mismatch.
    `shown` names what was hashed when it is not `archive` itself (a download not yet in place).
    """
    shown = shown or str(archive)
    if recipe_sha256 is not None:
        if found != recipe_sha256:
            raise SourceError(
                f"{shown} holds a tar with sha256 {found}; the recipe expects "
                f"{recipe_sha256} ({name} {ref})",
                hint="replace it with the archive of exactly that tag",
            )
        return "matches the recipe"
    folder = archive.parent
    lock = folder / LOCK_NAME
    with file_lock(folder / f".{LOCK_NAME}.lock", what="source lock update", wait=True):
        entries = read_lock(folder)
        entry = entries.get(archive.name)
        if entry is None:
            recorded = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            entries[archive.name] = {
                "name": name,
                "ref": ref,
                "tar_sha256": found,
                "recorded": recorded,
            }
            with atomic_path(lock) as temporary:
                temporary.write_text(
                    json.dumps({"archives": entries}, indent=2, sort_keys=True) + "\n"
                )
            reporter.warning(
                f"trust on first use: {recipe} records no hash for {name} {ref}; its tar sha256 "
                f"{found} is now recorded in {lock} and every later use of this folder is checked "
                f'against it. Once you trust it, add to the recipe: tar_sha256 = "{found}"'
            )
            return f"first use: recorded in {lock}"
    if entry["tar_sha256"] != found:
        raise SourceError(
            f"{shown} holds a tar with sha256 {found}, but {lock} recorded "
            f"{entry['tar_sha256']} when it was first used ({entry['recorded']})",
            hint="the archive changed since: restore the one first used, or, if the change is "
            f"expected, delete its entry from {lock}",
        )
    return f"matches the hash recorded on first use ({entry['recorded']}) in {lock}"
