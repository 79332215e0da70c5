"""Check a simple index against PEP 503 (HTML), PEP 691 (JSON) and PEP 658/714 (metadata).

Every link must point at a file whose sha256 matches its fragment, every metadata hash at a
`.metadata` file that matches, and the JSON page must list exactly what the HTML page lists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from packaging.utils import canonicalize_name

from toolchain.util.datafile import load_json
from toolchain.util.files import sha256_file
from toolchain.util.simple_api import anchors

API_META = re.compile(r'<meta name="pypi:repository-version" content="1\.\d+">')


def validate(root: Path) -> list[str]:
    """Problems with every `*/simple/` index under `root`; empty when all is well."""
    problems: list[str] = []
    simples = sorted(root.glob("*/simple"))
    if not simples:
        return [f"{root}: no VARIANT/simple/ index"]
    for simple in simples:
        problems += _check_root(simple)
        for project in sorted(p for p in simple.iterdir() if p.is_dir()):
            problems += _check_project(project)
    return problems


def _check_root(simple: Path) -> list[str]:
    problems = []
    page = (simple / "index.html").read_text()
    data = load_json(simple / "index.json")
    if not API_META.search(page) or data.get("meta", {}).get("api-version", "")[:2] != "1.":
        problems.append(f"{simple}: missing pypi:repository-version / meta.api-version 1.x")
    listed = [text for _, text in anchors(page)]
    folders = sorted(p.name for p in simple.iterdir() if p.is_dir())
    if sorted(listed) != folders or sorted(p["name"] for p in data["projects"]) != folders:
        problems.append(f"{simple}: HTML {listed} / JSON projects do not match folders {folders}")
    problems += [
        f"{simple}: {n} is not a normalized name" for n in folders if canonicalize_name(n) != n
    ]
    return problems


def _check_project(folder: Path) -> list[str]:
    problems: list[str] = []
    page = (folder / "index.html").read_text()
    data: dict[str, Any] = load_json(folder / "index.json")
    if data.get("name") != folder.name:
        problems.append(f"{folder}: JSON name {data.get('name')!r} is not {folder.name!r}")
    from_html: dict[str, tuple[str, str, str | None, str | None]] = {}
    for attrs, text in anchors(page):
        url, fragment = urldefrag(attrs.get("href") or "")
        target = (folder / unquote(url)).resolve()
        if not fragment.startswith("sha256=") or not target.is_file():
            problems.append(f"{folder}: {text}: no file or no sha256 fragment at {url}")
            continue
        if sha256_file(target) != fragment.removeprefix("sha256="):
            problems.append(f"{folder}: {text}: sha256 fragment does not match the file")
        if not text.endswith(".whl"):  # a wheel-variants {name}-{version}-variants.json
            from_html[text] = (url, fragment, None, None)
            continue
        core = attrs.get("data-core-metadata") or ""
        metadata = target.with_name(target.name + ".metadata")
        if core != attrs.get("data-dist-info-metadata") or not metadata.is_file():
            problems.append(f"{folder}: {text}: core metadata missing or PEP 714 attrs disagree")
        elif core != f"sha256={sha256_file(metadata)}":
            problems.append(f"{folder}: {text}: core-metadata hash does not match")
        from_html[text] = (url, fragment, attrs.get("data-requires-python"), core)
    from_json = {
        f["filename"]: (
            f["url"],
            f"sha256={f['hashes']['sha256']}",
            f.get("requires-python"),
            f"sha256={f['core-metadata']['sha256']}" if "core-metadata" in f else None,
        )
        for f in data.get("files", [])
    }
    if from_html != from_json:
        problems.append(f"{folder}: the JSON page and the HTML page list different files")
    return problems
