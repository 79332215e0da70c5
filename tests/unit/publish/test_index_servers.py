"""Upload-server profiles: each kind's upload URL and simple index, and `auto` asking the server
(a loopback fake answering as each server does) instead of guessing from the URL's depth."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.errors import PublishError
from toolchain.publish.index_servers import KINDS, server_kind
from toolchain.publish.upload import existing_files, roll_back
from toolchain.settings import SETTINGS

Server = Callable[[Callable[..., BaseHTTPRequestHandler]], str]

# kind -> (an upload URL, the simple index the server lists its files under)
URLS = {
    "pypiserver": ("http://pypi.internal:8080/", "http://pypi.internal:8080/simple/"),
    "devpi": ("https://devpi.internal/ci/cpu/", "https://devpi.internal/ci/cpu/+simple/"),
    "nexus": (
        "https://nexus.internal/repository/pypi-cpu/",
        "https://nexus.internal/repository/pypi-cpu/simple/",
    ),
    "artifactory": (
        "https://jfrog.internal/artifactory/api/pypi/pypi-cpu",
        "https://jfrog.internal/artifactory/api/pypi/pypi-cpu/simple/",
    ),
    "gitlab": (
        "https://gitlab.internal/api/v4/projects/42/packages/pypi",
        "https://gitlab.internal/api/v4/projects/42/packages/pypi/simple/",
    ),
}


@pytest.mark.parametrize("kind", sorted(URLS))
def test_each_kind_lists_its_files_where_that_server_does(kind: str) -> None:
    upload, simple = URLS[kind]
    assert server_kind(kind, upload).simple_url(upload) == simple


@pytest.mark.parametrize(
    ("kind", "url"),
    [
        ("nexus", "https://nexus.internal/pypi-cpu/"),
        ("artifactory", "https://jfrog.internal/artifactory/pypi-cpu/"),
        ("gitlab", "https://gitlab.internal/api/v4/projects/42/"),
        ("devpi", "https://devpi.internal/"),
    ],
)
def test_an_upload_url_of_another_shape_is_refused_with_the_right_one(kind: str, url: str) -> None:
    with pytest.raises(PublishError, match=r"is not a .* upload URL, which is") as caught:
        server_kind(kind, url)
    assert KINDS[kind].upload_shape in caught.value.message


def test_the_setting_offers_exactly_the_table_s_kinds() -> None:
    (setting,) = (s for s in SETTINGS if s.name == "server_kind")
    assert setting.choices == ("auto", *KINDS)


def _answering(
    status: int,
    headers: Mapping[str, str],
    body: str,
    seen: list[str] | None = None,
    files: Mapping[str, str] | None = None,
) -> type[BaseHTTPRequestHandler]:
    """A server answering every GET so, except the paths of `files` (200, that text)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if seen is not None:
                seen.append(self.path)
            found = (files or {}).get(self.path)
            self.send_response(status if found is None else 200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write((body if found is None else found).encode())

    return Handler


WELCOME = "<html><title>Welcome to pypiserver!</title></html>"
ANSWERS = {
    # kind -> (the path of its upload URL, how the server answers a GET of it)
    "pypiserver": ("/", 200, {"Server": "WSGIServer/0.2"}, WELCOME),
    "devpi": ("/ci/cpu/", 200, {}, json.dumps({"type": "indexconfig", "result": {}})),
    "nexus": ("/repository/pypi-cpu/", 200, {"Server": "Nexus/3.61.0-02 (OSS)"}, "<html/>"),
    # an HTTP error is an answer too: Artifactory asks for credentials
    "artifactory": ("/artifactory/api/pypi/cpu", 401, {"X-JFrog-Version": "7.77.5"}, ""),
    "gitlab": ("/api/v4/projects/42/packages/pypi", 404, {"X-Gitlab-Meta": "{}"}, "{}"),
}


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_auto_asks_the_server_which_kind_it_is(kind: str, http_server: Server) -> None:
    path, status, headers, body = ANSWERS[kind]
    url = http_server(_answering(status, headers, body)) + path
    assert server_kind("auto", url).name == kind


def test_a_nexus_upload_url_as_deep_as_devpi_s_gets_nexus_s_simple_index(
    http_server: Server,
) -> None:
    """Guessing from the depth took /repository/NAME/ for devpi's /USER/INDEX/ (+simple)."""
    seen: list[str] = []
    url = http_server(_answering(404, {"Server": "Nexus/3.61.0-02 (OSS)"}, "", seen))
    upload = url + "/repository/pypi-cpu/"
    assert existing_files(upload, "VCB_Demo", server_kind("auto", upload)) == {}
    assert seen == ["/repository/pypi-cpu/", "/repository/pypi-cpu/simple/vcb-demo/"]


def test_a_static_folder_is_recognised_and_takes_no_upload(http_server: Server) -> None:
    listing = _answering(200, {}, "<html>Directory listing</html>", files={
        "/index/variants.json": "{}"})  # fmt: skip
    url = http_server(listing) + "/index/"
    with pytest.raises(PublishError, match="is a static folder: it takes no uploads") as caught:
        server_kind("auto", url)
    assert "--index-dir" in caught.value.hint


def test_a_server_like_none_of_them_is_named_and_the_flag_too(http_server: Server) -> None:
    url = http_server(_answering(200, {"Server": "nginx"}, "<html>hello</html>")) + "/"
    with pytest.raises(PublishError, match="cannot tell which kind of index server") as caught:
        server_kind("auto", url)
    assert "--server-kind pypiserver | devpi" in caught.value.hint
    assert "VCB_SERVER_KIND" in caught.value.hint


def test_an_unreachable_server_is_said_so() -> None:
    with pytest.raises(PublishError, match="cannot reach"):
        server_kind("auto", "http://127.0.0.1:9/")


def test_only_pypiserver_is_sent_remove_pkg_on_a_rollback() -> None:
    upload = URLS["nexus"][0]  # not reachable: a request would fail the test
    left = roll_back(["vcbdemo-1.0+cpu.avx2-py3-none-any.whl"], {}, upload, KINDS["nexus"])
    assert left.removed == []
    assert left.left == [
        "vcbdemo-1.0+cpu.avx2-py3-none-any.whl (Sonatype Nexus is not sent pypiserver's "
        "remove_pkg: remove it in the server)"
    ]


def test_publish_takes_the_kind_from_flag_and_environment(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make_wheel: Callable[..., Path],
) -> None:
    wheels = make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable").parent
    argv = ["publish", "--wheel-dir", str(wheels), "--index-dir", str(tmp_path / "index"),
            "--upload", "https://nexus.internal/pypi/", "--work-dir", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--server-kind", "nexus"]) == 12
    assert "is not a Sonatype Nexus upload URL" in capsys.readouterr().err
    monkeypatch.setenv("VCB_SERVER_KIND", "artifactory")
    assert main(argv) == 12
    assert "is not a JFrog Artifactory upload URL" in capsys.readouterr().err
    assert main([*argv, "--server-kind", "bitbucket"]) == 2
    assert "--server-kind is auto or pypiserver" in capsys.readouterr().err
    assert not (tmp_path / "index").exists(), "a refused upload writes no index"
