"""Compile progress: the phase, n/N with percent and an ETA, CI log folding, GitHub's summary."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from toolchain.compile import compilation
from toolchain.compile.compilation import EtaBasis, MemoryGuard, compile_logged
from toolchain.compile.progress import (
    Folding,
    Phases,
    cache_hit_rate,
    ci_folding,
    ci_group,
    counter,
    eta_seconds,
    learned_cpu_per_unit,
    phase_of,
    step_summary,
)
from toolchain.plan.earlier import earlier_builds
from toolchain.settings import BUILD_TYPE_LEVEL


@pytest.mark.parametrize(
    ("line", "phase"),
    [
        ("[3/507] Building CXX object _deps/onednn-build/src/cpu/x64/jit_avx2.cpp.o", "oneDNN"),
        ("[9/507] Building CXX object src/common/dnnl_debug.cpp.o", "oneDNN"),
        ("[300/507] Building CXX object CMakeFiles/_C.dir/csrc/cpu/attention.cpp.o", "kernels"),
        ("[506/507] Linking CXX shared module _C.abi3.so", "link"),
    ],
)
def test_each_ninja_line_has_its_phase(line: str, phase: str) -> None:
    assert phase_of(line) == phase


def test_a_phase_only_moves_forward_and_each_is_one_github_group(capsys) -> None:
    phases = Phases(folding=Folding(ci="github"))
    for phase in ("configure", "oneDNN", "kernels", "oneDNN", "kernels", "link"):
        phases.enter(phase)
    phases.end()
    assert capsys.readouterr().out.splitlines() == [
        "::group::compile: configure", "::endgroup::",
        "::group::compile: oneDNN", "::endgroup::",
        "::group::compile: kernels", "::endgroup::",
        "::group::compile: link", "::endgroup::",
    ]  # fmt: skip


def test_each_phase_is_one_collapsed_gitlab_section(capsys) -> None:
    stamps = iter(range(1_765_000_000, 1_765_000_100, 10))
    phases = Phases(folding=Folding(ci="gitlab", clock=lambda: float(next(stamps))))
    for phase in ("configure", "oneDNN", "kernels", "oneDNN", "link"):
        phases.enter(phase)
    phases.end()
    k = "\x1b[0K"  # erase to the end of the line, around each marker as GitLab's docs write it
    assert capsys.readouterr().out.split("\n") == [  # splitlines would split at the \r
        f"{k}section_start:1765000000:compile_configure[collapsed=true]\r{k}compile: configure",
        f"{k}section_end:1765000010:compile_configure\r{k}",
        f"{k}section_start:1765000020:compile_oneDNN[collapsed=true]\r{k}compile: oneDNN",
        f"{k}section_end:1765000030:compile_oneDNN\r{k}",
        f"{k}section_start:1765000040:compile_kernels[collapsed=true]\r{k}compile: kernels",
        f"{k}section_end:1765000050:compile_kernels\r{k}",
        f"{k}section_start:1765000060:compile_link[collapsed=true]\r{k}compile: link",
        f"{k}section_end:1765000070:compile_link\r{k}",
        "",
    ]  # fmt: skip


def test_a_section_name_holds_only_what_gitlab_allows(capsys) -> None:
    folding = Folding(ci="gitlab", clock=lambda: 7.9)
    folding.start("build: 0.32.0 (avx2)")
    folding.end("build: 0.32.0 (avx2)")
    start, end, _ = capsys.readouterr().out.split("\n")
    assert start.startswith("\x1b[0Ksection_start:7:build_0.32.0__avx2_[collapsed=true]\r")
    assert start.endswith("\x1b[0Kbuild: 0.32.0 (avx2)")
    assert end == "\x1b[0Ksection_end:7:build_0.32.0__avx2_\r\x1b[0K"


@pytest.mark.parametrize(
    ("env", "ci"),
    [
        ({"GITHUB_ACTIONS": "true"}, "github"),
        ({"GITLAB_CI": "true"}, "gitlab"),
        ({"GITLAB_CI": "false", "CI": "true"}, ""),
        ({}, ""),
    ],
)
def test_the_ci_is_read_from_the_variables_it_sets(env: dict[str, str], ci: str) -> None:
    assert ci_folding(env).ci == ci


def test_the_repair_step_is_folded_in_gitlab_and_nothing_outside_ci(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GITLAB_CI", "true")
    with ci_group("repair"):
        pass
    out = capsys.readouterr().out
    assert re.fullmatch(
        r"\x1b\[0Ksection_start:\d+:repair\[collapsed=true\]\r\x1b\[0Krepair\n"
        r"\x1b\[0Ksection_end:\d+:repair\r\x1b\[0K\n",
        out,
    ), out
    monkeypatch.delenv("GITLAB_CI")
    with ci_group("repair"):
        pass
    phases = Phases(folding=Folding())
    phases.enter("configure")
    phases.enter("link")
    phases.end()
    assert capsys.readouterr().out == ""


def test_the_eta_comes_from_learned_cpu_seconds_else_from_the_pace_so_far() -> None:
    # 400 units left, 6 CPU-s each, 3 jobs: 800 s, whatever the pace so far
    assert eta_seconds(100, 500, 50.0, cpu_per_unit=6.0, jobs=3) == 800.0
    assert eta_seconds(100, 500, 50.0, cpu_per_unit=None, jobs=3) == 200.0
    assert eta_seconds(0, 500, 50.0, cpu_per_unit=None, jobs=3) is None
    assert eta_seconds(500, 500, 50.0, cpu_per_unit=None, jobs=3) == 0.0
    assert counter(176, 507, 1320.0) == "176/507 (34%), ETA 22.0 min"
    assert counter(3, 0, None) == "3/?"


AVX2 = "0.32.0+cpu.avx2"


def _manifest(folder: Path, name: str, version: str = AVX2, **fields: object) -> None:
    record = {"created": "2026-12-01T00:00:00", "build_type": "Release",
              "compile": {"cpu_seconds": 1000.0, "steps": 100}} | fields  # fmt: skip
    (folder / f"vllm-{version}-{name}.whl.manifest.json").write_text(json.dumps(record))


def _learned(
    folder: Path,
    version: str = AVX2,
    *,
    build_type: str = "Release",
    precompiled: bool = False,
    torch_headers: str = "full",
) -> float | None:
    like = earlier_builds(
        folder,
        version,
        arch="x86_64",
        build_type=build_type,
        opt_level=BUILD_TYPE_LEVEL[build_type],  # manifests from before the level
        precompiled=precompiled,
        torch_headers=torch_headers,
    )
    return learned_cpu_per_unit(like)


def test_the_newest_earlier_build_like_this_one_teaches_the_cpu_seconds(tmp_path: Path) -> None:
    _manifest(tmp_path, "old")
    _manifest(tmp_path, "new", created="2026-12-04T00:00:00", compile={"cpu_seconds": 1200.0,
              "steps": 100})  # fmt: skip
    _manifest(tmp_path, "other-target", "0.32.0+cpu.portable", created="2026-12-05T00:00:00")
    _manifest(tmp_path, "no-figures", created="2026-12-06T00:00:00", compile=None)
    _manifest(tmp_path, "arm", created="2026-12-06T00:00:00", target_arch="aarch64")
    (tmp_path / f"vllm-{AVX2}-broken.whl.manifest.json").write_text("{not json")
    assert _learned(tmp_path) == 12.0
    assert _learned(tmp_path, "0.16.0+cpu.avx2") is None
    # a build with precompiled headers teaches only another such build, a build type only its
    # own, one with the lean <torch/all.h> only another such (a manifest without the key: full)
    _manifest(tmp_path, "pch", created="2026-12-07T00:00:00", precompiled_headers=["_C_AVX2"],
              compile={"cpu_seconds": 900.0, "steps": 100})  # fmt: skip
    _manifest(tmp_path, "debug-info", created="2026-12-08T00:00:00", build_type="RelWithDebInfo",
              compile={"cpu_seconds": 2000.0, "steps": 100})  # fmt: skip
    _manifest(tmp_path, "lean", created="2026-12-09T00:00:00", torch_headers="lean",
              compile={"cpu_seconds": 1000.0, "steps": 100})  # fmt: skip
    assert _learned(tmp_path) == 12.0
    assert _learned(tmp_path, precompiled=True) == 9.0
    assert _learned(tmp_path, build_type="RelWithDebInfo") == 20.0
    assert _learned(tmp_path, torch_headers="lean") == 10.0


def test_the_step_summary_is_a_table_in_github_actions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    step_summary({"target": "avx2", "wheel": "`v.whl`", "cache hit rate": "87% (87 of 100)"})
    assert summary.read_text().splitlines() == [
        "| target | wheel | cache hit rate |",
        "| --- | --- | --- |",
        "| avx2 | `v.whl` | 87% (87 of 100) |",
        "",
    ]
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    step_summary({"target": "avx2"})
    assert summary.read_text().count("| target |") == 1


def test_the_cache_hit_rate_says_why_there_is_none() -> None:
    assert cache_hit_rate({"used": True, "hits": 87, "misses": 13}) == "87% (87 of 100)"
    assert cache_hit_rate({"used": True, "hits": 0, "misses": 0}) == "no lookups"
    assert cache_hit_rate(None) == "no shared cache"


NINJA_LIKE = r"""
echo '-- Configuring done'; sleep 0.6
echo '[1/4] Building CXX object _deps/onednn-build/src/a.cpp.o'; sleep 0.6
echo '[2/4] Building CXX object CMakeFiles/_C.dir/csrc/b.cpp.o'; sleep 0.6
echo '[3/4] Building CXX object CMakeFiles/_C.dir/csrc/c.cpp.o'; sleep 0.6
echo '[4/4] Linking CXX shared module _C.abi3.so'; sleep 0.6
"""


@pytest.mark.integration
def test_the_compile_shows_phases_percent_and_eta_in_github_actions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setattr(compilation, "QUIET_INTERVAL", 0.0)  # a line per sample, not per 30 s
    compile_logged(
        ["sh", "-c", NINJA_LIKE], env=dict(os.environ), cwd=tmp_path, log=tmp_path / "build.log",
        guard=MemoryGuard(margin_bytes=0, resume_bytes=0), interval=0.2,
        eta=EtaBasis(cpu_per_unit=6.0, jobs=2),
    )  # fmt: skip
    out = capsys.readouterr().out
    groups = re.findall(r"::group::compile: (\S+)", out)
    assert groups == ["configure", "oneDNN", "kernels", "link"]
    assert out.count("::endgroup::") == 4
    assert "[oneDNN] 1/4 (25%), ETA 9.0 s" in out, out  # 3 units x 6 CPU-s over 2 jobs
    assert "[kernels] 3/4 (75%), ETA 3.0 s" in out, out
    assert "[link] 4/4 (100%), ETA 0.0 s" in out, out


@pytest.mark.integration
def test_the_compile_folds_each_phase_in_gitlab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GITLAB_CI", "true")
    monkeypatch.setattr(compilation, "QUIET_INTERVAL", 0.0)
    compile_logged(
        ["sh", "-c", NINJA_LIKE], env=dict(os.environ), cwd=tmp_path, log=tmp_path / "build.log",
        guard=MemoryGuard(margin_bytes=0, resume_bytes=0), interval=0.2,
    )  # fmt: skip
    out = capsys.readouterr().out
    started = re.findall(r"section_start:\d+:compile_(\w+)\[collapsed=true\]", out)
    assert started == ["configure", "oneDNN", "kernels", "link"]
    assert re.findall(r"section_end:\d+:compile_(\w+)\r", out) == started
    assert "::group::" not in out
