"""A URL's user part reaches its own server as Basic auth, and no other server (#31 F6, F13)."""

from __future__ import annotations

import base64
import socket
import threading
import urllib.error
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolchain.util.net import open_url, reachable
from toolchain.util.simple_api import project_files

PAGE = b'<a href="../../files/demo-1.0-py3-none-any.whl#sha256=00">demo-1.0-py3-none-any.whl</a>'


def _handler(seen: list[tuple[str, str | None]], redirect: str = "") -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path == "/moved/" and redirect:
                self.send_response(302)
                self.send_header("Location", redirect)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    return Handler


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type, *, ipv6: bool = False) -> str:
        server = (_V6Server if ipv6 else ThreadingHTTPServer)(
            ("::1" if ipv6 else "127.0.0.1", 0), handler
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        host = "[::1]" if ipv6 else "127.0.0.1"
        return f"{host}:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_the_user_part_becomes_basic_auth(serve: Callable[..., str], ipv6: bool) -> None:
    seen: list[tuple[str, str | None]] = []
    where = serve(_handler(seen), ipv6=ipv6)
    files = project_files(f"http://me%40corp.com:p%40ss@{where}/simple/demo/")
    assert [f.url for f in files] == [
        f"http://me%40corp.com:p%40ss@{where}/files/demo-1.0-py3-none-any.whl"
    ]
    assert seen == [("/simple/demo/", _basic("me@corp.com", "p@ss"))]
    assert reachable(f"http://TOKEN@{where}/") and seen[-1] == ("/", _basic("TOKEN", ""))


def test_a_redirect_to_another_server_never_carries_the_credentials(
    serve: Callable[..., str],
) -> None:
    elsewhere: list[tuple[str, str | None]] = []
    other = serve(_handler(elsewhere))
    seen: list[tuple[str, str | None]] = []
    here = serve(_handler(seen, redirect=f"http://{other}/simple/"))
    with open_url(f"http://u:pw@{here}/moved/", timeout=10) as answer:
        assert answer.read() == PAGE
    assert seen == [("/moved/", _basic("u", "pw"))]
    assert elsewhere == [("/simple/", None)]


def test_a_redirect_on_the_same_server_keeps_them(serve: Callable[..., str]) -> None:
    seen: list[tuple[str, str | None]] = []
    here = serve(_handler(seen, redirect="/simple/"))
    with open_url(f"http://u:pw@{here}/moved/", timeout=10):
        pass
    assert seen == [("/moved/", _basic("u", "pw")), ("/simple/", _basic("u", "pw"))]


@pytest.mark.parametrize("url", ["http://host:abc/", "http://[::1/", "http://u:p/w@host/"])
def test_a_url_urllib_cannot_open_is_an_oserror(url: str) -> None:
    with pytest.raises(urllib.error.URLError) as caught:
        open_url(url, timeout=1)
    assert "p/w" not in str(caught.value)
    assert not reachable(url, timeout=1)
