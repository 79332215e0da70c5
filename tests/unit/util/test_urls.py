"""The one redactor, and URLs checked up front (#31 F4, F12, F13): no credential is ever printed,
in any form a user writes one, and no URL is a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.util.urls import has_secret, redact, split_credentials

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PLAN = [
    "plan",
    "--cpuinfo",
    str(FIXTURES / "cpuinfo" / "x86-zen4.txt"),
    "--meminfo",
    str(FIXTURES / "meminfo" / "buildhost-24g.txt"),
]
SECRET = "Zq9sEcReT"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"https://{SECRET}@host/simple/", "https://***@host/simple/"),  # a token as user name
        (f"https://{SECRET}:@host/", "https://***@host/"),
        (f"https://me@corp.com:{SECRET}@host/x", "https://***@host/x"),  # an @ in the user name
        (f"https://u:p@{SECRET}@host/", "https://***@host/"),  # an @ in the password
        (f"https://u:{SECRET}@host/", "https://***@host/"),
        (f"https://{SECRET}:x-oauth-basic@host/", "https://***@host/"),  # GitHub's token form
        (f"https://u:pa/{SECRET}@host/simple/", "https://***@host/simple/"),  # a / in it
        (f"https://u:12?{SECRET}@host/", "https://***@host/"),
        (f"https://u%40x:{SECRET}%2F@host/", "https://***@host/"),
        (f"cannot read http://u:{SECRET}@[::1]:8080/simple/: refused",
         "cannot read http://***@[::1]:8080/simple/: refused"),
        (f"'https://u:{SECRET}@h'", "'https://***@h'"),
        (f'["https://u:{SECRET}@h/", "a@b"]', '["https://***@h/", "a@b"]'),
        (f"https://host/simple/?token={SECRET}&x=1", "https://host/simple/?token=***&x=1"),
        (f"https://host/?private_token={SECRET}", "https://host/?private_token=***"),
        (f"https://h/?access_token={SECRET};api_key={SECRET}",
         "https://h/?access_token=***;api_key=***"),
        (f"https://h/a?key={SECRET}&password={SECRET}&secret={SECRET}&sig={SECRET}",
         "https://h/a?key=***&password=***&secret=***&sig=***"),
        (f"s3://b/x?X-Amz-Signature={SECRET}&X-Amz-Credential={SECRET}",
         "s3://b/x?X-Amz-Signature=***&X-Amz-Credential=***"),
    ],
)  # fmt: skip
def test_every_form_of_credentials_is_hidden(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert SECRET not in redact(text) and has_secret(text)
    assert redact(redact(text)) == redact(text), "redacting twice changes nothing"


@pytest.mark.parametrize(
    "text",
    [
        "https://pypi.org/simple/",
        "http://[::1]:8080/simple/vllm/",
        "https://host:8080/simple/?version=1.0",
        "git+https://github.com/org/repo.git@v1.0",  # a ref, not a user
        "write to me@corp.com",
    ],
)
def test_urls_without_credentials_are_shown_as_they_are(text: str) -> None:
    assert redact(text) == text and not has_secret(text)


def test_credentials_are_split_off_decoded() -> None:
    assert split_credentials("https://me%40corp.com:p%40w@[::1]:80/x?y=1") == (
        "https://[::1]:80/x?y=1",
        ("me@corp.com", "p@w"),
    )
    assert split_credentials(f"https://{SECRET}@host/") == ("https://host/", (SECRET, ""))
    assert split_credentials("https://host/") == ("https://host/", None)


@pytest.fixture
def tools(fake_programs) -> None:
    fake_programs.add("g++", "12.2.0\n")
    fake_programs.add("python3.11", "")


@pytest.mark.parametrize(
    "url",
    [
        f"https://u:{SECRET}@torch.internal/whl/cpu",
        f"https://{SECRET}@torch.internal/whl/cpu",
        f"https://torch.internal/whl/cpu?private_token={SECRET}",
    ],
)
def test_plan_never_shows_the_torch_index_credentials(
    url: str, tools: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main([*PLAN, "--torch-index", url]) == 0
    text = capsys.readouterr().out
    assert "torch.internal/whl/cpu" in text and SECRET not in text
    monkeypatch.setenv("VCB_TORCH_INDEX", url)
    assert main([*PLAN, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "torch.internal" in data["torch"]["index_url"] and SECRET not in json.dumps(data)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*PLAN, "--cache", f"ftp://u:{SECRET}@cache/"], "not a cache URL"),
        ([*PLAN, "--dist-scheduler", f"ftp://u:{SECRET}@sched:10600"], "not an http(s) URL"),
        ([*PLAN, "--cache", f"redis://{SECRET}@cache:6379"], "credentials do not go in the URL"),
        ([*PLAN, "--cache", f"redis://cache:6379/?password={SECRET}"], "credentials do not go"),
        ([*PLAN, "--torch-index", f"ftp://u:{SECRET}@h/"], "--torch-index takes a URL"),
        (["install-command", "--index", f"ftp://{SECRET}@h/"], "--index takes a URL"),
        (["install-command", "--index", f"http://u:{SECRET}@127.0.0.1:1/simple/"],
         "cannot read http://***@127.0.0.1:1/simple/"),
        (["install-command", "--index", f"http://127.0.0.1:1/simple/?token={SECRET}"],
         "?token=***"),
    ],
)  # fmt: skip
def test_errors_about_a_url_never_show_its_credentials(
    argv: list[str],
    words: str,
    tools: None,
    no_probe: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VCB_DIST_TOKEN", "client-token")
    assert main(argv) in (2, 12)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err, err
    assert SECRET not in err


@pytest.mark.parametrize("flag", ["--index-url", "--torch-index", "--cache", "--dist-scheduler"])
@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://host:abc/simple/", "the port is not a number"),
        ("http://host:99999/simple/", "the port is not a number"),
        (f"https://u:pa/{SECRET}@host/simple/", "the port is not a number"),
        ("http://[::1/simple/", "an unbalanced '['"),
        ("http://::1]:8080/simple/", "an unbalanced"),
        ("http://[zz]:8080/simple/", "not an IPv6 address"),
    ],
)
def test_a_bad_port_or_ipv6_host_is_one_usage_error(
    flag: str,
    url: str,
    words: str,
    tools: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VCB_DIST_TOKEN", "client-token")
    url = url.replace("http://", "redis://") if flag == "--cache" else url
    assert main([*PLAN, flag, url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} ") and words in err, err
    assert len(err.splitlines()) == 2 and SECRET not in err  # the error and its hint


@pytest.mark.parametrize("url", ["http://host:abc/", "http://[::1/", "https://u:p/w@host/"])
def test_install_command_and_publish_refuse_a_bad_port_the_same_way(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install-command", "--index", url]) == 2
    assert main(["publish", "--wheel-dir", str(tmp_path), "--index-dir", str(tmp_path / "i"),
                 "--upload", url]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("error: ") == 2 and "Traceback" not in err and "p/w" not in err
