"""install-command honours pip's own configuration (issue #33): files and PIP_* read as pip does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from toolchain.cli import main
from toolchain.errors import UsageError
from toolchain.publish import wheel_variants
from toolchain.publish.index import publish_index
from toolchain.publish.install_command import plan_install, plan_uv_install
from toolchain.util import pip_config
from toolchain.util.pip_config import PipConfig, read_pip_config

HOST = {"avx2": True, "f16c": True}
V3_HOST = dict.fromkeys(wheel_variants.V3, True)
X86 = "py3-none-linux_x86_64"
MIRROR = "https://mirror.example/simple"


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose global, user and site folders are under tmp_path (files written by
    the test): global/pip/pip.conf, etc/pip.conf, home/.pip/pip.conf, home/.config/pip/pip.conf."""
    monkeypatch.setattr(pip_config, "SYSTEM_DIR", tmp_path / "etc")
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "global")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_each_file_and_variable_overrides_the_ones_pip_reads_before_it(
    tmp_path: Path, machine: dict[str, str]
) -> None:
    prefix = tmp_path / "venv"
    write(tmp_path / "global/pip/pip.conf", "[global]\nindex-url = https://global/\n")
    write(tmp_path / "etc/pip.conf", "[global]\nindex-url = https://etc/\nfind-links = /etc-w\n")
    assert read_pip_config(machine, prefix).index_url == "https://etc/"
    user = write(tmp_path / "home/.config/pip/pip.conf", "[global]\nindex_url = https://user/\n")
    assert read_pip_config(machine, prefix).index_url == "https://user/"
    write(prefix / "pip.conf", "[global]\nindex-url = https://site/\n")
    found = read_pip_config(machine, prefix)
    assert (found.index_url, found.find_links) == ("https://site/", ("/etc-w",))
    assert found.origin("index-url") == f"{prefix / 'pip.conf'} [global]"
    chosen = write(tmp_path / "chosen.conf", "[global]\nindex-url = https://chosen/\n")
    environ = {**machine, "PIP_CONFIG_FILE": str(chosen)}
    assert read_pip_config(environ, prefix).index_url == "https://chosen/"
    environ["PIP_INDEX_URL"] = "https://variable/"
    assert read_pip_config(environ, prefix).origin("index-url") == "PIP_INDEX_URL"
    assert read_pip_config(environ, prefix).index_url == "https://variable/"
    user.write_text("[install]\nindex-url = https://user-install/\n")
    del environ["PIP_INDEX_URL"]
    assert read_pip_config(environ, prefix).index_url == "https://chosen/", (
        "an existing PIP_CONFIG_FILE skips the user files"
    )


def test_an_install_section_beats_global_in_any_file_and_lists_split_on_whitespace(
    tmp_path: Path, machine: dict[str, str]
) -> None:
    write(
        tmp_path / "etc/pip.conf", "[install]\nextra-index-url =\n    https://a/\n    https://b/\n"
    )
    write(tmp_path / "home/.config/pip/pip.conf", "[global]\nextra-index-url = https://c/\n")
    assert read_pip_config(machine, tmp_path).extra_index_urls == ("https://a/", "https://b/")
    environ = {**machine, "PIP_EXTRA_INDEX_URL": "https://d/ https://e/"}
    assert read_pip_config(environ, tmp_path).extra_index_urls == ("https://d/", "https://e/")


def test_pip_config_file_devnull_reads_no_file_and_a_broken_file_is_named(
    tmp_path: Path, machine: dict[str, str]
) -> None:
    write(tmp_path / "etc/pip.conf", "[global]\nindex-url = https://etc/\n")
    assert read_pip_config({**machine, "PIP_CONFIG_FILE": os.devnull}, tmp_path) == PipConfig()
    broken = write(tmp_path / "broken.conf", "index-url = https://no-section/\n")
    with pytest.raises(UsageError, match=f"pip's configuration file {broken} cannot be read"):
        read_pip_config({**machine, "PIP_CONFIG_FILE": str(broken)}, tmp_path)


@pytest.mark.integration
def test_the_reading_agrees_with_pip_s_own(tmp_path: Path, machine: dict[str, str]) -> None:
    """pip itself resolves the same files and variables to the same values."""
    write(tmp_path / "global/pip/pip.conf", "[install]\nfind-links = /g1 /g2\n")
    write(tmp_path / "home/.pip/pip.conf", "[global]\nindex-url = https://legacy/\n")
    write(tmp_path / "home/.config/pip/pip.conf", "[global]\nextra-index-url = https://u/\n")
    chosen = write(tmp_path / "chosen.conf", "[global]\nindex-url = https://chosen/\n")
    cases = [
        {**machine},
        {**machine, "PIP_CONFIG_FILE": str(chosen)},
        {**machine, "PIP_CONFIG_FILE": str(tmp_path / "absent.conf"), "PIP_FIND_LINKS": "/e"},
        {**machine, "PIP_INDEX_URL": "https://variable/"},
    ]
    ask = (
        "import json; from pip._internal.commands import create_command; "
        "o = create_command('install').parser.get_default_values(); "
        "print(json.dumps([o.index_url, o.extra_index_urls, o.find_links]))"
    )
    for environ in cases:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | environ
        pip_says = json.loads(
            subprocess.run(
                [sys.executable, "-c", ask], env=env, check=True, capture_output=True, text=True
            ).stdout
        )
        ours = read_pip_config(environ, Path(sys.prefix))
        pip_index = None if pip_says[0] == "https://pypi.org/simple" else pip_says[0]
        assert [ours.index_url, list(ours.extra_index_urls), list(ours.find_links)] == [
            pip_index,
            *pip_says[1:],
        ], environ


@pytest.fixture
def index(tmp_path: Path, make_wheel: Callable[..., Path]) -> Path:
    """A published index with one wheel that needs `packaging`."""
    return published(tmp_path, make_wheel, ("packaging",))


def published(tmp_path: Path, make_wheel: Callable[..., Path], requires: tuple[str, ...]) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, "vcbdemo", "1.0+cpu.avx2", requires=requires)
    publish_index(sorted(folder.glob("*.whl")), tmp_path / "index")
    return tmp_path / "index"


def test_pip_s_index_url_replaces_pypi_unless_the_toolkit_s_is_given(index: Path) -> None:
    config = PipConfig(index_url=MIRROR, origins={"index-url": "PIP_INDEX_URL"})
    plan = plan_install(index.as_uri(), HOST, project="vcbdemo", pip_config=config)
    assert plan.commands[0][4:6] == ("--index-url", MIRROR)
    assert "# public index from pip's configuration (PIP_INDEX_URL)" in plan.render()
    given = plan_install(
        index.as_uri(), HOST, project="vcbdemo", pip_config=config, public_index="https://given/"
    )
    assert given.commands[0][4:6] == ("--index-url", "https://given/")
    assert "pip's configuration (PIP_INDEX_URL)" not in given.render()
    plain = plan_install(index.as_uri(), HOST, project="vcbdemo")
    assert plain.commands[0][4:6] == ("--index-url", "https://pypi.org/simple")


def test_the_torch_note_names_what_pip_s_configuration_offers(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    index = published(tmp_path, make_wheel, ("packaging", "torch==2.9.0+cpu"))
    bare = plan_install(index.as_uri(), HOST, project="vcbdemo").render()
    assert "pip's configuration names no other index or folder: give --find-links" in bare
    config = PipConfig(find_links=("/opt/wheels",), origins={"find-links": "/etc/pip.conf"})
    offered = plan_install(index.as_uri(), HOST, project="vcbdemo", pip_config=config).render()
    assert "it must come from pip's own configuration" in offered
    assert "--find-links /opt/wheels" not in offered, "pip reads its configuration itself"


def test_uv_gets_pip_s_sources_on_its_command_line(
    tmp_path: Path, make_wheel: Callable[..., Path]
) -> None:
    folder = tmp_path / "wheels"
    for target in ("avx2", "portable"):
        make_wheel(folder, "vcbdemo", f"1.0+cpu.{target}", tag=X86, requires=("packaging",))
    publish_index(sorted(folder.glob("*.whl")), tmp_path / "index", wheel_variants=True)
    config = PipConfig(
        index_url=MIRROR,
        extra_index_urls=("https://extra/",),
        find_links=("/w",),
        origins={"index-url": "a.conf [global]", "extra-index-url": "b.conf [install]"},
    )
    plan = plan_uv_install(
        (tmp_path / "index").as_uri(), V3_HOST, uv="uv", project="vcbdemo", pip_config=config
    )
    assert plan.commands[0][5:] == (
        "--index-url",
        MIRROR,
        "--extra-index-url",
        "https://extra/",
        "--find-links",
        "/w",
        "packaging",
    )
    assert "# uv reads no pip configuration: given here from b.conf [install]" in plan.render()


def test_install_command_reads_a_temporary_pip_config_file(
    index: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conf = write(tmp_path / "pip.conf", f"[install]\nindex-url = {MIRROR}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setattr("toolchain.detect.host.detect_host", lambda: SimpleNamespace(isa=HOST))
    argv = ["install-command", "--index-dir", str(index), "--package", "vcbdemo"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"--index-url {MIRROR} packaging" in out
    assert f"# public index from pip's configuration ({conf} [install])" in out
    assert main([*argv, "--index-url", "https://given/simple"]) == 0
    assert "--index-url https://given/simple packaging" in capsys.readouterr().out
