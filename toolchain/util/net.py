"""Opening URLs: the one place urllib meets a URL a user gave.

urllib would take `user:pw@host` for the host name ("Name or service not known"), so the user
part is stripped and sent as Basic auth instead, to that origin only: a redirect to another host
(pypiserver sends unknown names to PyPI) or from https to http never carries it. A URL urllib
cannot open at all (a port that is not a number) is an OSError like an unreachable server, so
callers have one failure to handle.
"""

from __future__ import annotations

import base64
import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from toolchain.util.urls import redact, split_credentials


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        return parts.scheme, parts.hostname, parts.port
    except ValueError:  # a redirect to a bad port: no origin of ours
        return parts.scheme, None, None


class _OriginAuth(urllib.request.BaseHandler):
    """Basic auth on every request (redirects included) to one origin, and to no other."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.origin = _origin(url)
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.header = f"Basic {token}"

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        if _origin(request.full_url) == self.origin and not request.has_header("Authorization"):
            request.add_unredirected_header("Authorization", self.header)
        return request

    https_request = http_request


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the redirect answer itself is the result (an HTTPError)


def open_url(
    url: str,
    *,
    timeout: float,
    method: str | None = None,
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    redirects: bool = True,
) -> Any:
    """The response to `url` (a context manager); OSError (HTTPError included) on failure."""
    handlers: list[urllib.request.BaseHandler] = [] if redirects else [_NoRedirect()]
    try:
        bare, credentials = split_credentials(url)
        if credentials is not None:
            handlers.append(_OriginAuth(bare, *credentials))
        request = urllib.request.Request(
            bare, data=data, headers=dict(headers or {}), method=method
        )
        return urllib.request.build_opener(*handlers).open(request, timeout=timeout)
    except (ValueError, http.client.InvalidURL) as exc:  # a bad port, an unbalanced [
        raise urllib.error.URLError(f"not a URL urllib can open: {redact(str(exc))}") from exc


def reachable(url: str, timeout: float = 10.0) -> bool:
    """Whether a server answers at `url` at all (an HTTP error is still an answer)."""
    try:
        with open_url(url, method="HEAD", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def github_reachable() -> bool:
    return reachable("https://github.com", timeout=5.0)
