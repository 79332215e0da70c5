"""install-command against an index that serves hostile or broken pages (issue #31: F3, F17,
F18): what it prints is safe to pipe into `sh`, and every bad page is one `error:` line."""

from __future__ import annotations

import json
import shlex
import string
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolchain.cli import main
from toolchain.errors import PublishError
from toolchain.publish.install_command import InstallPlan, plan_install, plan_uv_install
from toolchain.util import simple_api
from toolchain.util.simple_api import IndexFile

JSON = "application/vnd.pypi.simple.v1+json"
HOST = dict.fromkeys(["avx2", "f16c", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"], True)
GOOD = "vcbdemo-1.0+cpu.avx2-py3-none-any.whl"
# each passes packaging's own parser (build and platform tags may hold any character) and the
# Python tag check (py3-none-any is in its compressed tag set)
HOSTILE = (
    "vcbdemo-2.0+cpu.avx2-py3-none-any.x\ntouch /tmp/pwned\n.whl",
    "vcbdemo-2.0+cpu.avx2-1;touch${IFS}pwned;-py3-none-any.whl",
    "vcbdemo-2.0+cpu.avx2-py3-none-any.$(touch pwned).whl",
)
Pages = Mapping[str, tuple[str, bytes]]


@pytest.fixture
def index(
    http_server: Callable[[Callable[..., BaseHTTPRequestHandler]], str],
) -> Callable[[Pages], str]:
    """Serve `pages` (path -> (content type, body)) on a loopback port; the root URL."""

    def serve(pages: Pages) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind, body = pages.get(self.path, ("text/plain", b""))
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return http_server(Handler) + "/"

    return serve


@pytest.fixture
def cli(fake_programs, no_probe: None) -> None:
    """What install-command's host detection asks for, faked: no process is started."""
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")


@pytest.fixture
def good_wheel(tmp_path: Path, make_wheel: Callable[..., Path]) -> Path:
    return make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.avx2", requires=("packaging",))


def _entry(name: str, url: str) -> dict[str, object]:
    return {"filename": name, "url": url, "hashes": {}, "core-metadata": True}


def _flat(wheel: Path, names: tuple[str, ...], metadata: bytes | None = None) -> Pages:
    """A flat index (no variants.json): /simple/vcbdemo/ lists `names`, all served as `wheel`."""
    page = {"files": [_entry(name, "/files/good.whl") for name in names]}
    return {
        "/simple/vcbdemo/": (JSON, json.dumps(page).encode()),
        "/files/good.whl": ("application/octet-stream", wheel.read_bytes()),
        "/files/good.whl.metadata": ("text/plain", metadata or _metadata(wheel)),
    }


def _metadata(wheel: Path) -> bytes:
    from toolchain.wheelfile import core_metadata

    return core_metadata(wheel)


def assert_safe_for_sh(plan: InstallPlan) -> None:
    """Every line printed is a comment with no control character, or exactly a planned command."""
    commands = {shlex.join(command) for command in plan.commands}
    for line in plan.render().splitlines():
        assert line.startswith("# ") or line in commands, line
        assert line.isprintable(), line
        if line in commands:
            assert shlex.split(line) in [list(c) for c in plan.commands]


def test_a_served_file_name_cannot_run_a_command(
    index: Callable[[Pages], str], good_wheel: Path
) -> None:
    url = index(_flat(good_wheel, (GOOD, *HOSTILE)))
    plan = plan_install(url + "simple/", HOST, project="vcbdemo")
    assert_safe_for_sh(plan)
    assert plan.chosen.filename == GOOD, "names that are not wheel names are never chosen"
    rendered = plan.render()
    assert "touch /tmp/pwned\n" not in rendered and "\\ntouch /tmp/pwned\\n" in rendered
    assert rendered.count("# warning: skipped") == len(HOSTILE)


def test_a_folded_requires_dist_stays_inside_its_comment(
    index: Callable[[Pages], str], good_wheel: Path
) -> None:
    metadata = _metadata(good_wheel) + b"Requires-Dist: torchvision\n touch /tmp/pwned\n"
    url = index(_flat(good_wheel, (GOOD,), metadata))
    plan = plan_install(url + "simple/", HOST, project="vcbdemo")
    assert_safe_for_sh(plan)
    assert "# left out torchvision touch /tmp/pwned: not a valid requirement" in plan.render()


def test_uv_commands_are_safe_from_served_names(
    index: Callable[[Pages], str], good_wheel: Path
) -> None:
    fallback = "vcbdemo-1.0+cpu-py3-none-any.whl"
    v3 = "vcbdemo-1.0+cpu-py3-none-any-x86_64_v3.whl"
    hostile = "vcbdemo-1.0+cpu-py3-none-any.x\ntouch pwned\n-x86_64_v4.whl"
    page = {"files": [_entry(n, "/files/good.whl") for n in (fallback, v3, hostile)]}
    pages = {
        **_flat(good_wheel, ()),
        "/wheel-variants/simple/vcbdemo/": (JSON, json.dumps(page).encode()),
    }
    plan = plan_uv_install(index(pages), HOST, uv="uv", project="vcbdemo")
    assert_safe_for_sh(plan)
    assert plan.chosen.filename == v3


@pytest.mark.parametrize(
    ("names", "chosen"),
    [
        (("vcbdemo-bad.whl", GOOD), GOOD),
        (("vcbdemo-1.0+cpu-py3-none-any-x86_64_v3.whl", GOOD), GOOD),  # a uv variant: not pip's
        (("other-3.0+cpu.avx2-py3-none-any.whl", GOOD), GOOD),  # another project's wheel
        (("vcbdemo-bad.whl", "vcbdemo-1.0.tar.gz"), None),
    ],
)
def test_names_that_are_not_wheel_names_are_skipped_with_a_warning(
    index: Callable[[Pages], str], good_wheel: Path, names: tuple[str, ...], chosen: str | None
) -> None:
    url = index(_flat(good_wheel, names)) + "simple/"
    if chosen is None:
        with pytest.raises(PublishError, match=r"no wheel of vcbdemo: .*'vcbdemo-bad\.whl'"):
            plan_install(url, HOST, project="vcbdemo")
        return
    plan = plan_install(url, HOST, project="vcbdemo")
    assert plan.chosen.filename == chosen
    skipped = [name for name in names if name != chosen]
    assert [f"skipped {name!r}" in plan.render() for name in skipped] == [True] * len(skipped)


def test_install_command_with_only_bad_names_is_one_error_line(
    index: Callable[[Pages], str],
    good_wheel: Path,
    capsys: pytest.CaptureFixture[str],
    cli: None,
) -> None:
    url = index(_flat(good_wheel, ("vllm-bad.whl",)))
    code = main(["install-command", "--index", url + "simple/", "--package", "vcbdemo"])
    out, err = capsys.readouterr()
    assert code == 12 and out == "", (out, err)
    assert err.startswith("error: ") and "Traceback" not in err
    assert "'vllm-bad.whl'" in err


MALFORMED_JSON = [
    b"not json",
    b"\xff\xfe{",
    b"[]",
    b"{}",
    b'{"files": "x"}',
    b'{"files": [1]}',
    b'{"files": [{"filename": 1, "url": "/a.whl"}]}',
    b'{"files": [{"filename": "a.whl"}]}',
    b'{"files": [{"filename": "a.whl", "url": "/a.whl", "hashes": []}]}',
    b'{"files": [{"filename": "a.whl", "url": "/a.whl", "hashes": {"sha256": 5}}]}',
    b'{"files": [{"filename": "a.whl", "url": "http://[::1/a.whl"}]}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
]


@pytest.mark.parametrize("body", MALFORMED_JSON, ids=lambda b: repr(b[:40]))
def test_a_malformed_pep_691_page_is_a_page_error(body: bytes) -> None:
    with pytest.raises(simple_api.PageError, match=r"PEP 691"):
        simple_api.parse_project_page(body, JSON, "https://x/simple/vcbdemo/")


def test_a_malformed_html_page_is_a_page_error() -> None:
    with pytest.raises(simple_api.PageError, match="not a PEP 503 page"):
        simple_api.parse_project_page(b"<![foo[ x ]]>", "text/html", "https://x/simple/vcbdemo/")


MALFORMED_VARIANTS = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"variants": {"avx2": {"simple": 5, "min_isa": [], "projects": {"vcbdemo": []}}}}',
    b'{"variants": {"avx2": {"simple": "avx2/simple/", "min_isa": "avx2", "projects": "vcbdemo"}}}',
    b'{"variants": {"avx2": {"simple": "http://elsewhere/simple/", "min_isa": [],'
    b' "projects": {"vcbdemo": []}}}}',
    b'{"variants": {"a\\nb": {"simple": "a/simple/", "min_isa": ["x\\ny"],'
    b' "projects": {"vcbdemo": []}}}}',
]


@pytest.mark.parametrize("where", ["page", "variants"])
@pytest.mark.parametrize("body", [*MALFORMED_JSON, *MALFORMED_VARIANTS], ids=lambda b: repr(b[:30]))
def test_install_command_on_malformed_json_is_one_error_line(
    index: Callable[[Pages], str],
    good_wheel: Path,
    capsys: pytest.CaptureFixture[str],
    cli: None,
    where: str,
    body: bytes,
) -> None:
    pages = dict(_flat(good_wheel, (GOOD,)))
    if where == "page":
        pages["/simple/vcbdemo/"] = (JSON, body)
        root = index(pages) + "simple/"
    else:
        pages["/variants.json"] = ("application/json", body)
        root = index(pages)
    code = main(["install-command", "--index", root, "--package", "vcbdemo"])
    out, err = capsys.readouterr()
    assert code == 12 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") <= 2, err
    assert "Traceback" not in err and all(line.isprintable() for line in err.splitlines())


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=400), kind=st.sampled_from([JSON, "text/html"]))
def test_any_page_is_files_or_a_page_error(body: bytes, kind: str) -> None:
    try:
        files = simple_api.parse_project_page(body, kind, "https://x/simple/vcbdemo/")
    except simple_api.PageError:
        return
    assert all(isinstance(f.filename, str) and isinstance(f.url, str) for f in files)


NAME_PARTS = st.sampled_from(
    [
        "1.0",
        "+cpu",
        ".avx2",
        "-",
        "py3",
        "none",
        "any",
        "_",
        "x86_64_v3",
        "!",
        "$(id)",
        ";",
        "\n",
        " ",
        "`",
        "\x1b[2J",
        "\u2028",
        "/..",
    ]
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(NAME_PARTS, max_size=14), labelled=st.booleans())
def test_only_plain_wheel_names_of_the_project_are_kept(parts: list[str], labelled: bool) -> None:
    from toolchain.publish.served import wheel_files  # here: the old code had no such module

    name = f"vcbdemo-{''.join(parts)}.whl"
    found = wheel_files([IndexFile(filename=name, url="u", sha256=None, has_metadata=False)],
                        "vcbdemo", labelled=labelled)  # fmt: skip
    for file in found.files:
        assert set(file.filename) <= set(string.ascii_letters + string.digits + "._-+!")
    assert all(warning.isprintable() for warning in found.warnings())


def test_publish_never_serves_a_name_that_is_not_pep_427(
    tmp_path: Path, make_wheel: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = make_wheel(tmp_path / "w", "vcbdemo", "1.0+cpu.avx2", tag="py3-none-any.$(id)")
    argv = ["publish", "--wheel-dir", str(wheel.parent), "--index-dir", str(tmp_path / "index")]
    assert main(argv) == 12
    assert "not a wheel file name (PEP 427" in capsys.readouterr().err
    assert not (tmp_path / "index").exists()


def test_a_wheel_served_from_a_local_file_url_is_skipped(
    index: Callable[[Pages], str], good_wheel: Path
) -> None:
    """An http index cannot make install-command read this machine's files (file:, ftp:)."""
    pages = dict(_flat(good_wheel, (GOOD,)))
    local = {"files": [_entry(GOOD, f"{good_wheel.as_uri()}"), _entry(GOOD, "ftp://x/a.whl")]}
    pages["/simple/vcbdemo/"] = (JSON, json.dumps(local).encode())
    with pytest.raises(PublishError, match=r"served from a file: URL.*served from a ftp: URL"):
        plan_install(index(pages) + "simple/", HOST, project="vcbdemo")
