"""The sdist comes through pip's own network layer and configuration (here: a loopback index that
wants credentials, which only ~/.netrc gives), is checked against the recipe, and is cached."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolchain.compile import sources
from toolchain.compile.sources import fetch_new_sdist, fetch_sdist
from toolchain.errors import SourceError

pytestmark = pytest.mark.integration
PAYLOAD = b"sdist bytes"
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
USER, PASSWORD = "builder", "s3cret"


class _Index(http.server.BaseHTTPRequestHandler):
    """A tiny index on loopback: PEP 691 JSON or PEP 503 HTML, the file, optional Basic auth."""

    json_api = True
    needs_auth = False
    stated = DIGEST  # the sha256 the index states for the file

    def do_GET(self) -> None:
        wanted = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.needs_auth and self.headers.get("Authorization") != wanted:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        if self.path == "/simple/vllm/":
            if self.json_api:
                name, hashes = "vllm-0.1.0.tar.gz", {"sha256": self.stated}
                files = [{"filename": name, "url": f"../../files/{name}", "hashes": hashes}]
                body = json.dumps({"meta": {"api-version": "1.0"}, "name": "vllm", "files": files})
                kind = "application/vnd.pypi.simple.v1+json"
            else:
                body = (
                    f'<a href="/files/vllm-0.1.0.tar.gz#sha256={self.stated}">vllm-0.1.0.tar.gz</a>'
                )
                kind = "text/html"
            data = body.encode()
        elif self.path == "/files/vllm-0.1.0.tar.gz":
            data, kind = PAYLOAD, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _serve(**settings: bool | str) -> Iterator[str]:
    handler = type("Handler", (_Index,), settings)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple"
    finally:
        server.shutdown()


@pytest.fixture(params=[True, False], ids=["json", "html"])
def index(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(json_api=request.param)


@pytest.fixture
def private_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An index that answers 401 without credentials; the credentials are in $HOME/.netrc only."""
    monkeypatch.setenv("HOME", str(tmp_path))
    netrc = tmp_path / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    yield from _serve(needs_auth=True)


def _fetch(cache: Path, index_url: str, sha256: str = DIGEST) -> Path:
    return fetch_sdist(
        sdist="vllm-0.1.0.tar.gz", sha256=sha256, cache=cache, index_url=index_url, mirror=None
    )


def test_sdist_comes_through_pip_and_is_cached(
    tmp_path: Path, index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache" / "vllm-0.1.0.tar.gz"
    assert _fetch(cache, index).read_bytes() == PAYLOAD
    assert "through pip" in capsys.readouterr().out
    _fetch(cache, index)
    assert "cached at" in capsys.readouterr().out
    with pytest.raises(SourceError, match="the recipe expects"):
        _fetch(tmp_path / "x", index, sha256="f" * 64)
    assert not (tmp_path / "x").exists()
    assert not list(tmp_path.glob(".x*")), "nothing half-written left behind"


def test_pip_s_credentials_reach_a_private_index(tmp_path: Path, private_index: str) -> None:
    cache = tmp_path / "cache" / "vllm-0.1.0.tar.gz"
    assert _fetch(cache, private_index).read_bytes() == PAYLOAD
    # Without pip, urllib does not read .netrc: the same index refuses it.
    with pytest.raises(SourceError, match="401"):
        sources.index_file_url(private_index, "vllm", "vllm-0.1.0.tar.gz")


def test_without_a_usable_pip_urllib_fetches_it(
    tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "_pip_download", lambda *args: None)
    cache = tmp_path / "cache" / "vllm-0.1.0.tar.gz"
    assert _fetch(cache, index).read_bytes() == PAYLOAD


def test_a_new_release_s_sdist_is_kept_under_the_hash_the_index_states(
    tmp_path: Path, index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """new-recipe: no recipe knows the hash yet; the file is checked against the index's."""
    root = tmp_path / "sdists"
    path, sha256 = fetch_new_sdist(sdist="vllm-0.1.0.tar.gz", cache_root=root, index_url=index)
    # kept where build-wheel looks for the recipe's sdist
    assert (sha256, path) == (DIGEST, root / DIGEST / "vllm-0.1.0.tar.gz")
    assert path.read_bytes() == PAYLOAD and "through pip" in capsys.readouterr().out
    assert fetch_new_sdist(sdist="vllm-0.1.0.tar.gz", cache_root=root, index_url=index)[1] == DIGEST
    assert "cached at" in capsys.readouterr().out


def test_a_new_sdist_unlike_the_index_s_hash_is_not_kept(tmp_path: Path) -> None:
    root = tmp_path / "sdists"
    for index in _serve(stated="f" * 64):
        with pytest.raises(SourceError, match=r"the index states f{64}"):
            fetch_new_sdist(sdist="vllm-0.1.0.tar.gz", cache_root=root, index_url=index)
    assert [p for p in root.rglob("*") if p.is_file()] == []
