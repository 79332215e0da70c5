"""What an index serves is untrusted input: the file names install-command may use, and text made
safe to print into output that users pipe into `sh` (`install-command | sh`).

A served name is used only when it is a wheel file name as PEP 427 writes one (packaging's parser
alone lets a build or platform tag hold any character, a newline or `$(...)` included); every other
`.whl` name is skipped with a warning that shows it escaped.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from toolchain.errors import PublishError
from toolchain.publish.index import VARIANT_NAME
from toolchain.util.simple_api import IndexFile, load_json
from toolchain.wheelfile import wheel_name_problem

LABEL = re.compile(r"[a-z0-9_]{1,16}")  # PEP 825's variant label
FEATURE = re.compile(r"[a-z0-9_]+")  # an `isa` name of detect, as variants.json lists them
VARIANTS_HINT = "publish the index again (nox -s publish), or give the variant's simple/ URL"


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, escapes, Unicode line and
    format characters) written as its Python escape: one line, nothing a terminal acts on."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


@dataclass(frozen=True, kw_only=True)
class Wheels:
    """The wheels of one project on an index, and a warning for each `.whl` name skipped."""

    files: tuple[IndexFile, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (file name, why)

    def warnings(self) -> tuple[str, ...]:
        """One line each, the name escaped (repr): a newline in it stays inside the line."""
        return tuple(f"warning: skipped {name!r} on the index: {why}" for name, why in self.skipped)


def wheel_files(
    files: Iterable[IndexFile], project: str, *, labelled: bool = False, page_url: str = ""
) -> Wheels:
    """The files that are wheels of `project` by a valid name (with a PEP 825 variant label
    allowed when `labelled`) at an http(s) URL, or a file: URL on a file: index; anything else
    named `.whl` is skipped, and said so."""
    kept, skipped = [], []
    schemes = {"http", "https", *(["file"] if page_url.startswith("file:") else [])}
    for file in files:
        if not file.filename.endswith(".whl"):
            continue  # an sdist, a variants.json: not for us, and never printed
        why = name_problem(file.filename, project, labelled=labelled)
        if why is None and urllib.parse.urlsplit(file.url).scheme not in schemes:
            why = f"served from a {urllib.parse.urlsplit(file.url).scheme or 'relative'}: URL"
        if why is None:
            kept.append(file)
        else:
            skipped.append((file.filename, why))
    return Wheels(files=tuple(kept), skipped=tuple(skipped))


def name_problem(filename: str, project: str, *, labelled: bool = False) -> str | None:
    """Why `filename` is not a wheel of `project` install-command may use; None when it is."""
    label = variant_label(filename)
    if label is not None and not labelled:
        return "a variant wheel (PEP 825) that pip does not install"
    if label is not None and not LABEL.fullmatch(label):
        return f"{label!r} is not a variant label"
    problem = wheel_name_problem(plain(filename))
    if problem is not None:
        return problem
    name = parse_wheel_filename(plain(filename))[0]
    if name != canonicalize_name(project):
        return f"a wheel of {name}, not of {canonicalize_name(project)}"
    return None


def nothing_left(project: str, page: str, wheels: Wheels) -> PublishError:
    """The error when every wheel on a page was skipped: each name (escaped) and why."""
    names = "; ".join(f"{name!r} ({why})" for name, why in wheels.skipped)
    return PublishError(
        f"no wheel of {project}: {printable(page)} lists none install-command may use: {names}",
        hint="publish the wheels again with `nox -s publish`, or fix the index's file names",
    )


def variant_label(filename: str) -> str | None:
    """The variant label of a wheel file name (PEP 825: after the platform tag), or None."""
    parts = filename.removesuffix(".whl").split("-")
    has_build = len(parts) > 2 and parts[2][:1].isdigit()
    return parts[-1] if len(parts) == (7 if has_build else 6) else None


def plain(filename: str) -> str:
    """The file name without its variant label: what parsers that predate PEP 825 read."""
    label = variant_label(filename)
    return filename.removesuffix(f"-{label}.whl") + ".whl" if label else filename


def version_of(filename: str) -> Version:
    return Version(str(parse_wheel_filename(plain(filename))[1]))


def tags_of(filename: str) -> frozenset[Tag]:
    return frozenset(parse_wheel_filename(plain(filename))[3])


@dataclass(frozen=True, kw_only=True)
class VariantIndex:
    """One entry of a published root's variants.json."""

    name: str
    simple_url: str
    min_isa: tuple[str, ...]
    projects: frozenset[str]


def read_variants_json(body: bytes, root: str) -> tuple[VariantIndex, ...]:
    """The variant indexes a root lists, read strictly: each `simple` a relative path under the
    root, `min_isa` feature names, `projects` names; PublishError on anything else."""
    where = f"{printable(root)}variants.json"
    try:
        data = load_json(body)
        variants = data.get("variants") if isinstance(data, dict) else None
        if not isinstance(variants, dict):
            raise ValueError("no 'variants' table")
        return tuple(_variant(name, info, root) for name, info in variants.items())
    except (OSError, ValueError) as exc:
        raise PublishError(
            f"{where} is malformed ({printable(str(exc))}): not as `publish` writes it",
            hint=VARIANTS_HINT,
        ) from exc


def _variant(name: str, info: Any, root: str) -> VariantIndex:
    if not isinstance(info, Mapping) or not VARIANT_NAME.fullmatch(name):
        raise ValueError(f"variant {name!r} is not a name with a table")
    simple, min_isa, projects = info.get("simple"), info.get("min_isa"), info.get("projects")
    if not isinstance(simple, str) or not _relative_path(simple):
        raise ValueError(
            f"variant {name!r}: 'simple' is not a relative path such as {name}/simple/"
        )
    if not isinstance(min_isa, list) or not all(
        isinstance(f, str) and FEATURE.fullmatch(f) for f in min_isa
    ):
        raise ValueError(f"variant {name!r}: 'min_isa' is not a list of feature names")
    if not isinstance(projects, dict | list) or not all(isinstance(p, str) for p in projects):
        raise ValueError(f"variant {name!r}: 'projects' is not a table of project names")
    return VariantIndex(
        name=name,
        simple_url=urllib.parse.urljoin(root, simple),
        min_isa=tuple(min_isa),
        projects=frozenset(canonicalize_name(p) for p in projects),
    )


def _relative_path(url: str) -> bool:
    """A path below the root: no scheme, host, query, '..' or character a shell would read."""
    parts = urllib.parse.urlsplit(url)
    segments = parts.path.split("/")
    return (
        not (parts.scheme or parts.netloc or parts.query or parts.fragment)
        and not url.startswith("/")
        and ".." not in segments
        and re.fullmatch(r"[A-Za-z0-9_./-]+", url) is not None
    )
