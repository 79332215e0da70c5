"""Credentials reach pip, uv and twine through their environment, never their command line, and
never the screen (#31 F5). The real programs, scanned in /proc, are in
tests/integration/test_credentials.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolchain.cli import main
from toolchain.errors import UsageError
from toolchain.publish.index import publish_index
from toolchain.publish.upload import twine_env
from toolchain.util import run
from toolchain.util.index_env import secret_indexes_to_env, shown_command

SECRET = "Zq9sEcReT"
PIP = ["python", "-m", "pip", "install"]


def test_only_index_urls_with_credentials_leave_the_command_line() -> None:
    plain = [*PIP, "--index-url", "https://pypi.org/simple", "--find-links", "/w", "torch"]
    assert secret_indexes_to_env(plain) == (plain, {})
    argv = [*PIP, "--index-url", "https://pypi.org/simple",
            "--extra-index-url", "https://a.example/", "--extra-index-url",
            f"https://u:{SECRET}@b.example/", "torch"]  # fmt: skip
    moved, env = secret_indexes_to_env(argv)
    assert moved == [*PIP, "--index-url", "https://pypi.org/simple", "torch"]
    # every extra index goes: pip would drop the variable's for the command line's
    assert env == {"PIP_EXTRA_INDEX_URL": f"https://a.example/ https://u:{SECRET}@b.example/"}
    moved, env = secret_indexes_to_env(
        ["uv", "pip", "--index-url", f"https://{SECRET}@h/"], uv=True
    )
    assert (moved, env) == (["uv", "pip"], {"UV_INDEX_URL": f"https://{SECRET}@h/"})


def test_a_shown_command_has_no_user_part() -> None:
    shown, hidden = shown_command([*PIP, "--index-url", f"https://u:{SECRET}@h/simple/", "x"])
    assert shown == [*PIP, "--index-url", "https://h/simple/", "x"] and hidden
    assert shown_command([*PIP, "x"]) == ([*PIP, "x"], False)


def test_run_refuses_a_credential_on_any_command_line(fake_programs: Any) -> None:
    fake_programs.add("pip", "")
    for url in (f"https://u:{SECRET}@h/", f"https://{SECRET}@h/", f"https://h/?token={SECRET}"):
        with pytest.raises(UsageError) as caught:
            run.capture(["pip", "download", "--index-url", url])
        assert SECRET not in caught.value.message
    assert fake_programs.calls == [], "nothing was started"


def test_the_announced_environment_hides_secrets(
    fake_programs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_programs.add("twine", "")
    env = twine_env(f"https://me:{SECRET}@upload.example/", {"PATH": str(fake_programs.folder)})
    assert env["TWINE_REPOSITORY_URL"] == "https://upload.example/"
    assert (env["TWINE_USERNAME"], env["TWINE_PASSWORD"]) == ("me", SECRET)
    env["PIP_INDEX_URL"] = f"https://{SECRET}@h/simple/"
    run.run_logged(["twine", "upload", "x.whl"], log=tmp_path / "log", env=env)
    out = capsys.readouterr().out
    assert "TWINE_PASSWORD='***'" in out and "PIP_INDEX_URL='https://***@h/simple/'" in out
    assert SECRET not in out + (tmp_path / "log").read_text()


def test_install_command_shows_no_credentials_and_runs_pip_with_them_in_its_environment(
    tmp_path: Path,
    make_wheel: Callable[..., Path],
    served: Callable[[Path], str],
    no_probe: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_wheel(tmp_path / "wheels", "vcbdemo", "1.0+cpu.portable")
    publish_index(sorted((tmp_path / "wheels").glob("*.whl")), tmp_path / "site" / "index")
    index = served(tmp_path / "site").replace("http://", f"http://me:{SECRET}@") + "index/"
    started: list[tuple[list[str], dict[str, str]]] = []

    def pip(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        started.append((argv, kwargs.get("env") or {}))  # detect_host asks compilers too
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(run.subprocess, "run", pip)
    argv = ["install-command", "--index", index, "--package", "vcbdemo"]
    assert main([*argv, "--run", "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out + (tmp_path / "work" / "install.log").read_text()
    bare = index.replace(f"me:{SECRET}@", "")
    assert f"--index-url {bare}portable/simple/ --no-deps vcbdemo==1.0+cpu.portable" in out
    assert "the index credentials are not shown" in out
    [(command, env)] = [(argv, env) for argv, env in started if "pip" in argv]
    assert SECRET not in " ".join(command) and "--index-url" not in command
    assert env["PIP_INDEX_URL"] == f"{index}portable/simple/"
