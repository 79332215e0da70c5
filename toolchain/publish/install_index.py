"""What an internal index offers for install-command: its variants, their wheels, their needs.

A root published by `publish` lists its variants in variants.json; any other URL is one flat
simple index (pypiserver, devpi) on which variants differ only by their version label.
"""

from __future__ import annotations

import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from toolchain.errors import DataFileError, PublishError
from toolchain.publish.served import (
    Wheels,
    printable,
    read_variants_json,
    tags_of,
    version_of,
    wheel_files,
)
from toolchain.targets import (
    UNNAMED_VARIANT,
    Target,
    TargetCatalog,
    read_label,
    shipped_catalog,
)
from toolchain.util.simple_api import project_files, read_url
from toolchain.wheelfile import metadata_requirements, requires_dist

NO_VARIANT_HINT = (
    "publish a wheel this CPU runs: build one for a lower target (`build-wheel --target T`; "
    "docs/plan.md: `plan`, Targets)"
)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    filename: str
    url: str
    version: Version
    variant: str
    min_isa: tuple[str, ...]
    metadata_url: str | None
    simple_url: str
    target: Target | None = None  # None: no era of its platform knows its label


def fetch(url: str) -> bytes:
    """The body at `url`; PublishError when the index cannot be read."""
    try:
        return read_url(url)[0]
    except OSError as exc:
        raise PublishError(
            f"cannot read {printable(f'{url}: {exc}')}", hint="check --index"
        ) from exc


def runnable_indexes(
    index: str, host_isa: Mapping[str, bool], project: str
) -> list[tuple[str, tuple[str, ...] | None]]:
    """(simple URL, features its wheels need) for each index that may hold a wheel for here."""
    root = index.rstrip("/") + "/"
    try:
        body = fetch(urllib.parse.urljoin(root, "variants.json"))
    except PublishError:
        return [(root, None)]
    variants = read_variants_json(body, root)
    found: list[tuple[str, tuple[str, ...] | None]] = [
        (variant.simple_url, variant.min_isa)
        for variant in variants
        if canonicalize_name(project) in variant.projects
        and all(host_isa.get(feature) for feature in variant.min_isa)
    ]
    if not found:
        raise PublishError(
            f"{index} has no variant this CPU runs with {project}: "
            f"{sorted(v.name for v in variants)}",
            hint=NO_VARIANT_HINT,
        )
    return found


def served_wheels(
    page_url: str, project: str, *, labelled: bool = False, hint: str = "check --index"
) -> Wheels:
    """The wheels of `project` a project page lists by valid names (the rest skipped)."""
    try:
        files = project_files(page_url)
    except OSError as exc:  # unreachable, or not a Simple API page
        raise PublishError(
            f"cannot read {printable(page_url)}: {printable(str(exc))}", hint=hint
        ) from exc
    return wheel_files(files, project, labelled=labelled, page_url=page_url)


def candidates(
    simple_url: str,
    project: str,
    min_isa: tuple[str, ...] | None = None,
    catalog: TargetCatalog | None = None,
) -> tuple[list[Candidate], Wheels]:
    """The wheels on one simple index as candidates, and what was read (skipped names too); a
    wheel needs its variant's features, else its label's target's in its era (`catalog`)."""
    page_url = f"{simple_url.rstrip('/')}/{canonicalize_name(project)}/"
    wheels = served_wheels(page_url, project)
    catalog = catalog or shipped_catalog()
    found = []
    for file in wheels.files:
        version = version_of(file.filename)
        label = read_label(version)
        target = catalog.wheel_target(version, {tag.platform for tag in tags_of(file.filename)})
        found.append(
            Candidate(
                filename=file.filename,
                url=file.url,
                version=version,
                variant=label.variant if label else UNNAMED_VARIANT,
                min_isa=min_isa if min_isa is not None else target.min_isa if target else (),
                simple_url=simple_url,
                metadata_url=file.url + ".metadata" if file.has_metadata else None,
                target=target,
            )
        )
    return found, wheels


def candidate_requirements(candidate: Candidate) -> list[str]:
    """The wheel's Requires-Dist: from its core metadata file (PEP 658), else from the wheel."""
    try:
        if candidate.metadata_url is None:  # pypiserver serves no metadata files: read the wheel
            with tempfile.TemporaryDirectory() as folder:
                wheel = Path(folder) / candidate.filename  # a checked name: no '/' in it
                wheel.write_bytes(fetch(candidate.url))
                return requires_dist(wheel)
        return metadata_requirements(fetch(candidate.metadata_url).decode())
    except (DataFileError, UnicodeDecodeError) as exc:
        why = exc.message if isinstance(exc, DataFileError) else f"not UTF-8 ({exc.reason})"
        raise PublishError(
            f"the index serves {candidate.filename} with core metadata that cannot be read: "
            f"{printable(why)}",
            hint="publish the wheel again (nox -s publish), or check the index server",
        ) from exc
