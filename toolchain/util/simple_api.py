"""The one client of the Simple Repository API: PEP 503 HTML and PEP 691 JSON project pages.

It reads a project page into `IndexFile`s (absolute URL, sha256, whether PEP 658 core metadata is
served); callers decide what an unreachable index means for them (a SourceError when fetching an
sdist, a PublishError for publish and install-command). A page that is not what the API serves
(not JSON, wrong types, nested past any sane depth) or a broken HTTP answer is a PageError, an
OSError like the others: an index that answers nonsense is as unusable as one that does not answer.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin

from toolchain.errors import DataFileError
from toolchain.util.datafile import parse_json
from toolchain.util.net import open_url

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
Anchor = tuple[dict[str, str | None], str]


class PageError(OSError):
    """An index answered, but not with a page of the Simple Repository API."""


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    filename: str
    url: str  # absolute, without the #sha256= fragment
    sha256: str | None
    has_metadata: bool


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[Anchor] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.anchors.append((self._open, data))
            self._open = None


def anchors(text: str) -> list[Anchor]:
    """Every <a> of an HTML page: (its attributes, its text)."""
    parser = _Anchors()
    parser.feed(text)
    return parser.anchors


def sha256_fragment(url: str) -> tuple[str, str | None]:
    """(URL without fragment, the sha256 a `#sha256=` fragment states, or None)."""
    bare, fragment = urldefrag(url)
    return bare, fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None


def load_json(body: bytes) -> Any:
    """The JSON value of `body`; PageError when it is not JSON (or nested thousands deep)."""
    try:
        return parse_json(body, where="the page")
    except DataFileError as exc:
        raise PageError(str(exc).removeprefix("the page: ")[:120]) from exc


def parse_project_page(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """The files a project page lists, whether the server answered JSON or HTML; PageError
    (its message without the URL, which callers name) when it is neither."""
    try:
        if "json" in content_type:
            return _json_files(_pep_691(body), page_url)
        return _html_files(body.decode("utf-8", errors="replace"), page_url)
    except ValueError as exc:  # urljoin of a malformed URL (an unclosed IPv6 bracket)
        raise PageError(f"a file URL is malformed ({exc}): not a PEP 691/503 page") from exc


def _pep_691(body: bytes) -> Any:
    try:
        return load_json(body)
    except PageError as exc:
        raise PageError(f"not a PEP 691 page: {exc}") from exc


def _json_files(data: Any, page_url: str) -> list[IndexFile]:
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise PageError("not a PEP 691 project page (no 'files' list)")
    return [_json_file(entry, page_url, number) for number, entry in enumerate(files, 1)]


def _json_file(entry: Any, page_url: str, number: int) -> IndexFile:
    """One entry of a PEP 691 `files` list: filename and url strings, hashes a string table."""
    hashes = entry.get("hashes", {}) if isinstance(entry, dict) else None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("filename"), str)
        or not isinstance(entry.get("url"), str)
        or not isinstance(hashes, dict)
        or not all(isinstance(value, str) for value in hashes.values())
    ):
        raise PageError(
            f"file entry {number} is not as PEP 691 defines it (filename and url "
            "strings, hashes a table of strings)"
        )
    return IndexFile(
        filename=entry["filename"],
        url=urljoin(page_url, entry["url"]),
        sha256=hashes.get("sha256"),
        has_metadata=bool(entry.get("core-metadata") or entry.get("dist-info-metadata")),
    )


def _html_files(text: str, page_url: str) -> list[IndexFile]:
    try:
        found = anchors(text)
    except AssertionError as exc:  # html.parser on a marked section it does not know
        raise PageError(f"not a PEP 503 page ({exc})") from exc
    files = []
    for attrs, text in found:
        url, sha256 = sha256_fragment(urljoin(page_url, attrs.get("href") or ""))
        files.append(
            IndexFile(
                filename=text.strip(),
                url=url,
                sha256=sha256,
                has_metadata=bool(attrs.get("data-core-metadata")),
            )
        )
    return files


def read_url(
    url: str, accept: str = "*/*", *, timeout: float = 60, redirects: bool = True
) -> tuple[bytes, str]:
    """(body, content type) of `url`; OSError (HTTPError included) when it cannot be read."""
    headers = {"Accept": accept}
    try:
        with open_url(url, headers=headers, timeout=timeout, redirects=redirects) as answer:
            return answer.read(), answer.headers.get("Content-Type", "")
    except (http.client.HTTPException, ValueError) as exc:  # a broken answer (IncompleteRead)
        raise PageError(f"{type(exc).__name__}: {exc}") from exc


def project_files(page_url: str, *, timeout: float = 60, redirects: bool = True) -> list[IndexFile]:
    """The files on one project page (`.../simple/<project>/`); a file:// index reads index.html."""
    where = page_url + ("index.html" if page_url.startswith("file:") else "")
    body, kind = read_url(where, JSON_ACCEPT, timeout=timeout, redirects=redirects)
    return parse_project_page(body, kind, page_url)
