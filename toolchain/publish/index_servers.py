"""The index servers publish --upload knows, in one table: the upload URL each takes, where it
lists its files (the simple index), how it is recognised when asked, and what it can undo.

`--server-kind auto` (the default) asks the server (one GET of the upload URL, and of
URL/variants.json when nothing answered like a server) instead of guessing from the URL: a Nexus,
Artifactory or GitLab upload URL is as deep as a devpi one, but their simple indexes differ.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message

from toolchain.errors import DataFileError, PublishError
from toolchain.util.datafile import parse_json
from toolchain.util.net import open_url
from toolchain.util.urls import redact

AUTO = "auto"


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What the server said to a GET of the upload URL (an HTTP error is an answer too)."""

    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: str

    def json(self) -> object:
        """The body as JSON, or None when it is not JSON."""
        try:
            return parse_json(self.body, where="the answer")
        except DataFileError:
            return None

    def json_type(self) -> object:
        data = self.json()
        return data.get("type") if isinstance(data, dict) else None


@dataclass(frozen=True, kw_only=True)
class ServerKind:
    name: str  # what --server-kind takes
    what: str  # in the user's words
    upload_shape: str  # the upload URL, as docs and errors show it
    simple_shape: str  # its simple index
    path: re.Pattern[str]  # what the upload URL's path must look like
    simple: str  # appended to the upload URL for its simple index
    recognise: Callable[[Answer], bool]
    uploads: bool = True  # a static folder takes none: publish --index-dir writes it
    removes_versions: bool = False  # pypiserver's remove_pkg: a failed upload can be rolled back

    def simple_url(self, upload_url: str) -> str:
        """The simple index of the server that takes uploads at `upload_url`, ending in /."""
        return f"{upload_url.rstrip('/')}/{self.simple}"

    def check_url(self, upload_url: str) -> None:
        if not self.path.fullmatch(urllib.parse.urlsplit(upload_url).path or "/"):
            raise PublishError(
                f"{redact(upload_url)} is not a {self.what} upload URL, which is "
                f"{self.upload_shape}",
                hint="give that URL to --upload, or the server's kind to --server-kind",
            )


SERVER_KINDS = (
    ServerKind(
        name="pypiserver",
        what="pypiserver",
        upload_shape="http://HOST:PORT/ (its root)",
        simple_shape="http://HOST:PORT/simple/",
        path=re.compile(r".*"),
        simple="simple/",
        recognise=lambda answer: "pypiserver" in answer.body,  # its welcome page
        removes_versions=True,
    ),
    ServerKind(
        name="devpi",
        what="devpi",
        upload_shape="https://HOST/USER/INDEX/",
        simple_shape="https://HOST/USER/INDEX/+simple/",
        path=re.compile(r".*/[^/+]+/[^/+]+/?"),
        simple="+simple/",
        # devpi answers a JSON request with {"type": "indexconfig", ...} and names itself
        recognise=lambda answer: (
            answer.json_type() is not None or "x-devpi-server-version" in answer.headers
        ),
    ),
    ServerKind(
        name="nexus",
        what="Sonatype Nexus",
        upload_shape="https://HOST/repository/NAME/",
        simple_shape="https://HOST/repository/NAME/simple/",
        path=re.compile(r".*/repository/[^/]+/?"),
        simple="simple/",
        recognise=lambda answer: answer.headers.get("server", "").startswith("Nexus/"),
    ),
    ServerKind(
        name="artifactory",
        what="JFrog Artifactory",
        upload_shape="https://HOST/artifactory/api/pypi/REPO",
        simple_shape="https://HOST/artifactory/api/pypi/REPO/simple/",
        path=re.compile(r".*/api/pypi/[^/]+/?"),
        simple="simple/",
        recognise=lambda answer: (
            "x-artifactory-id" in answer.headers or "x-jfrog-version" in answer.headers
        ),
    ),
    ServerKind(
        name="gitlab",
        what="GitLab package registry",
        upload_shape="https://HOST/api/v4/projects/ID/packages/pypi",
        simple_shape="https://HOST/api/v4/projects/ID/packages/pypi/simple/",
        path=re.compile(r".*/api/v4/projects/[^/]+/packages/pypi/?"),
        simple="simple/",
        recognise=lambda answer: "x-gitlab-meta" in answer.headers,
    ),
    ServerKind(
        name="static",
        what="static folder",
        upload_shape="none: publish --index-dir DIR writes the folder, a web server serves it",
        simple_shape="https://HOST/DIR/VARIANT/simple/",
        path=re.compile(r".*"),
        simple="",
        recognise=lambda answer: False,  # asked apart: URL/variants.json, publish's own file
        uploads=False,
    ),
)
KINDS = {kind.name: kind for kind in SERVER_KINDS}


def server_kind(name: str, upload_url: str, headers: Mapping[str, str] | None = None) -> ServerKind:
    """The kind --server-kind names, or with `auto` the one the server says it is; the upload URL
    checked against the kind's shape."""
    kind = KINDS[name] if name != AUTO else detect(upload_url, headers or {})
    if not kind.uploads:
        raise PublishError(
            f"{redact(upload_url)} is a {kind.what}: it takes no uploads",
            hint="write it with publish --index-dir DIR (the folder the web server serves)",
        )
    kind.check_url(upload_url)
    return kind


def detect(upload_url: str, headers: Mapping[str, str]) -> ServerKind:
    answer = ask(upload_url, headers)
    found = next((kind for kind in SERVER_KINDS if kind.recognise(answer)), None)
    if found is None and _is_static(upload_url, headers):
        found = KINDS["static"]
    if found is None:
        raise PublishError(
            f"cannot tell which kind of index server {redact(upload_url)} is (it answered "
            f"{answer.status}, like none of {', '.join(KINDS)})",
            hint="name it: --server-kind " + " | ".join(KINDS) + " (VCB_SERVER_KIND)",
        )
    return found


def _is_static(url: str, headers: Mapping[str, str]) -> bool:
    """publish's static index: a variants.json that is JSON (not a page every path gets)."""
    answer = ask(f"{url.rstrip('/')}/variants.json", headers)
    return answer.status == 200 and isinstance(answer.json(), dict)


def ask(url: str, headers: Mapping[str, str]) -> Answer:
    """One GET; an HTTP error status is an answer, an unreachable server is a PublishError."""
    accept = {"Accept": "application/json, text/html;q=0.9, */*;q=0.1", **headers}
    try:
        with open_url(url, timeout=30, headers=accept, redirects=False) as response:
            return _answer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as exc:
        return _answer(exc.code, exc.headers, exc.read() if exc.fp else b"")
    except OSError as exc:
        raise PublishError(
            redact(f"cannot reach {url}: {exc}"), hint="is the index server running?"
        ) from exc


def _answer(status: int, headers: Message, body: bytes) -> Answer:
    return Answer(
        status=status,
        headers={name.lower(): value for name, value in headers.items()},
        body=body[:65536].decode("utf-8", errors="replace"),
    )
