"""The one client of the Simple Repository API: PEP 503 HTML and PEP 691 JSON project pages.

It reads a project page into `IndexFile`s (absolute URL, sha256, whether PEP 658 core metadata is
served); callers decide what an unreachable index means for them (a SourceError when fetching an
sdist, a PublishError for publish and install-command).
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

from toolchain.util.datafile import parse_json
from toolchain.util.net import open_url

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
Anchor = tuple[dict[str, str | None], str]


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


def parse_project_page(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """The files a project page lists, whether the server answered JSON or HTML."""
    if "json" in content_type:
        return [
            IndexFile(
                filename=entry["filename"],
                url=urljoin(page_url, entry["url"]),
                sha256=entry.get("hashes", {}).get("sha256"),
                has_metadata=bool(entry.get("core-metadata") or entry.get("dist-info-metadata")),
            )
            for entry in parse_json(body, where=page_url)["files"]
        ]
    files = []
    for attrs, text in anchors(body.decode("utf-8", errors="replace")):
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
    with open_url(url, headers={"Accept": accept}, timeout=timeout, redirects=redirects) as answer:
        return answer.read(), answer.headers.get("Content-Type", "")


def project_files(page_url: str, *, timeout: float = 60, redirects: bool = True) -> list[IndexFile]:
    """The files on one project page (`.../simple/<project>/`); a file:// index reads index.html."""
    where = page_url + ("index.html" if page_url.startswith("file:") else "")
    body, kind = read_url(where, JSON_ACCEPT, timeout=timeout, redirects=redirects)
    return parse_project_page(body, kind, page_url)
