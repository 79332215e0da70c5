"""The build runner: one build per build folder at a time, every planned step has code, an
interrupted venv is made anew, and what the user named is checked before anything runs."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from toolchain.compile import steps as steps_module
from toolchain.compile.runner import BuildRun, check_registry
from toolchain.compile.steps import STEPS, build_wheel, create_venv
from toolchain.detect.host import Host, detect_host
from toolchain.errors import BuildError, BusyError, SourceError, UsageError
from toolchain.options import BuildOptions
from toolchain.plan.buildplan import BuildPlan, Step
from toolchain.plan.planner import plan_build
from toolchain.plan.recipes import load_recipe
from toolchain.plan.switches import TORCH_LEAN
from toolchain.targets import default_recipes_dir
from toolchain.util.compile_cache import parse_cache


@pytest.fixture
def build_of(fake_programs, cpuinfo_file, tmp_path: Path) -> Callable[..., BuildRun]:
    fake_programs.add("g++-13", "13.2.0\n")
    fake_programs.add("python3.11", "")
    host: Host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))

    def make(**options: object) -> BuildRun:
        folders = {"work_dir": tmp_path / "work", "wheel_dir": tmp_path / "wheels"}
        chosen = BuildOptions(**{**folders, **options})  # type: ignore[arg-type]
        plan = plan_build(host, load_recipe(default_recipes_dir(), "0.32.0"), chosen)
        return BuildRun(plan=plan, host=host, options=chosen)

    return make


def test_a_second_build_in_the_same_folder_is_refused_while_the_first_runs(
    build_of: Callable[..., BuildRun], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()

    def fake_compile(build: BuildRun) -> None:
        started.set()
        assert release.wait(30)

    def deliver(build: BuildRun) -> None:
        build.facts.delivered = tmp_path / "vllm.whl"

    registry = {name: (lambda build: None) for name in STEPS}
    registry |= {"compile": fake_compile, "deliver": deliver}
    monkeypatch.setattr(steps_module, "STEPS", registry)
    source = tmp_path / "src"
    source.mkdir()
    first, second = build_of(source_dir=source), build_of(source_dir=source)
    results: list[Path] = []
    thread = threading.Thread(target=lambda: results.append(build_wheel(first)))
    thread.start()
    assert started.wait(30)
    with pytest.raises(BusyError, match=r"another build-wheel is running in .* \(pid \d+\)"):
        build_wheel(second)
    release.set()
    thread.join(30)
    assert results == [tmp_path / "vllm.whl"]
    assert BusyError.exit_code == 13


def test_a_step_the_toolkit_cannot_run_is_an_error_not_a_skip(
    build_of: Callable[..., BuildRun],
) -> None:
    build = build_of()
    plan: BuildPlan = dataclasses.replace(
        build.plan, steps=(*build.plan.steps, Step(name="complie", summary="a typo"))
    )
    with pytest.raises(BuildError, match="cannot run: complie"):
        check_registry(plan, STEPS)


def test_what_the_user_named_is_checked_before_anything_runs(
    build_of: Callable[..., BuildRun], tmp_path: Path
) -> None:
    with pytest.raises(BuildError, match=r"--source-dir .* is not a folder"):
        build_wheel(build_of(source_dir=tmp_path / "missing"))
    mirror = tmp_path / "mirror.tar"
    mirror.write_text("")
    with pytest.raises(SourceError, match=r"--sources .* is a file: it must be the mirror folder"):
        build_wheel(build_of(sources=mirror))
    assert not (tmp_path / "work" / "builds").exists(), "nothing was started"


def test_an_interrupted_venv_is_made_anew(
    build_of: Callable[..., BuildRun], fake_programs, tmp_path: Path
) -> None:
    build = build_of()
    venv = build.plan.paths.venv
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")  # Ctrl-C during `python -m venv`: no pip

    def make_venv(argv: list[str]) -> tuple[int, str]:
        python = Path(argv[3]) / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("")
        python.chmod(0o755)
        return 0, ""

    fake_programs.add("python3.11", answer=make_venv)
    fake_programs.add("python", "pip 24.0\n")
    create_venv(build)
    assert (venv / ".vcb-venv-complete").is_file()
    made = [c for c in fake_programs.calls if c[1:3] == ["-m", "venv"]]
    assert len(made) == 1, "the unfinished venv was replaced, not reused"
    create_venv(build)
    assert len([c for c in fake_programs.calls if c[1:3] == ["-m", "venv"]]) == 1


def test_the_build_uses_the_recipe_files_as_they_were_read_and_hashed(
    fake_programs, cpuinfo_file, tmp_path: Path
) -> None:
    """Issue #31 F22: the patch and prune-list files were read again when used, so a file
    changed after the recipe was loaded was applied under the old file's hash (in the manifest)."""
    recipes = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), recipes)
    fake_programs.add("g++-13", "13.2.0\n")
    fake_programs.add("python3.11", "")
    host = detect_host(cpuinfo_file=cpuinfo_file("x86-zen4"))
    options = BuildOptions(work_dir=tmp_path / "work", wheel_dir=tmp_path / "wheels", target="avx2")
    plan = plan_build(host, load_recipe(recipes, "0.32.0"), options)
    build = BuildRun(plan=plan, host=host, options=options)
    assert plan.patches and plan.onednn_prune is not None
    for loaded in (*plan.patches, plan.onednn_prune):
        loaded.file.write_text("changed after the recipe was loaded\n")

    applied: list[bytes] = []

    def patch(argv: list[str]) -> tuple[int, str]:
        applied.append(Path(argv[argv.index("-i") + 1]).read_bytes())
        return 0, ""

    fake_programs.add("patch", answer=patch)
    plan.paths.src.mkdir(parents=True)
    steps_module.apply_patches(build)
    assert [hashlib.sha256(content).hexdigest() for content in applied] == [
        p.sha256 for p in plan.patches
    ]
    steps_module.recipe_file(build, plan.onednn_prune)  # what the compile step does first
    skip = plan.env["CMAKE_ARGS"].split("-DVCB_ONEDNN_SKIP=")[1].split()[0]
    assert hashlib.sha256(Path(skip).read_bytes()).hexdigest() == plan.onednn_prune.sha256


@pytest.mark.parametrize("flag", ["--wheel-dir", "--work-dir", "--cache"])
def test_a_folder_the_build_cannot_write_is_refused_before_the_first_step(
    build_of: Callable[..., BuildRun], tmp_path: Path, flag: str
) -> None:
    """Issue #31 F8: an unwritable --wheel-dir was found by the deliver step, as a traceback after
    the whole compile. (A file where a folder must be: root can write anywhere else.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    where = blocker / "folder"
    option = {"--wheel-dir": {"wheel_dir": where}, "--work-dir": {"work_dir": where},
              "--cache": {"cache": parse_cache(str(where))}}[flag]  # fmt: skip
    build = build_of(**option)
    with pytest.raises(UsageError) as caught:
        build_wheel(build)
    assert caught.value.exit_code == 2
    assert f"{flag} {where} is not a folder this build can write into" in caught.value.message
    assert "nox -s build-wheel" in caught.value.hint
    assert not (tmp_path / "work" / "builds").exists(), "no step ran"


def test_an_old_patchelf_stops_the_build_before_the_compile(
    build_of: Callable[..., BuildRun], fake_programs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auditwheel repair refuses patchelf < 0.14.5 only after the hour-long compile: the
    check-toolchain step asks first."""
    monkeypatch.setattr(steps_module, "numa_header", lambda: Path("/usr/include/numa.h"))
    build = build_of()
    fake_programs.add("patchelf", "patchelf 0.14.3\n")
    with pytest.raises(BuildError, match=r"patchelf 0\.14\.3; auditwheel repair needs >= 0\.14\.5"):
        steps_module.check_toolchain(build)
    fake_programs.add("patchelf", "patchelf 0.19.3\n")
    steps_module.check_toolchain(build)
    assert build.facts.cxx_version == "13.2.0"


def test_the_lean_header_is_written_where_cmake_args_name_it(
    build_of: Callable[..., BuildRun],
) -> None:
    build = build_of()
    named = next(
        a.split("=", 1)[1] for a in build.plan.env["CMAKE_ARGS"].split() if "VCB_TORCH_LEAN=" in a
    )
    steps_module.lean_torch_header(build)
    written = Path(named) / "torch" / "all.h"
    assert written.read_bytes() == (TORCH_LEAN / "torch" / "all.h").read_bytes()
    assert written.is_relative_to(build.plan.paths.build_dir)


def test_the_manifest_names_the_level_and_the_libraries_the_last_configure_gave_headers(
    build_of: Callable[..., BuildRun], capsys: pytest.CaptureFixture[str]
) -> None:
    """As the configure said, not as planned: its last status lines win."""
    build = build_of(settings={**BuildOptions().settings, "precompiled_headers": True})
    build.log.parent.mkdir(parents=True)
    build.log.write_text(
        "-- vllm-cpu-builder: lean <torch/all.h> for _C\n"
        "-- vllm-cpu-builder: lean <torch/all.h> for dnnl_ext,_C,_C_AVX512,_C_AVX2\n"
        "-- vllm-cpu-builder: _C's csrc/old.cpp compiles torch's headers itself: #pragma x\n"
        "-- vllm-cpu-builder: <torch/all.h> precompiled for _C\n"
        "-- vllm-cpu-builder: _C's csrc/cpu/utils.cpp compiles torch's headers itself: "
        "#define gettid() syscall(SYS_gettid) (csrc/cpu/utils.cpp)\n"
        "-- vllm-cpu-builder: _C_AVX2's csrc/cpu/isa.cpp compiles torch's headers itself: "
        "it does not include torch's headers\n"
        "-- vllm-cpu-builder: <torch/all.h> precompiled for _C,_C_AVX2\n"
        "-- vllm-cpu-builder: -O3 for vLLM's libraries: CMAKE_CXX_FLAGS_RELEASE -O3 -DNDEBUG\n"
        "-- vllm-cpu-builder: -O2 for vLLM's libraries: CMAKE_CXX_FLAGS_RELEASE -O2 -DNDEBUG\n"
    )
    steps_module._check_configured(build)
    assert build.facts.opt_level == "O2"
    assert build.facts.lean_torch_headers == ("dnnl_ext", "_C", "_C_AVX512", "_C_AVX2")
    assert build.facts.precompiled_headers == ("_C", "_C_AVX2")
    assert build.facts.own_torch_headers == {
        "_C/csrc/cpu/utils.cpp": "#define gettid() syscall(SYS_gettid) (csrc/cpu/utils.cpp)",
        "_C_AVX2/csrc/cpu/isa.cpp": "it does not include torch's headers",
    }
    out = capsys.readouterr().out
    assert "no lean" not in out
    assert "no precompiled torch headers for _C_AVX512: vLLM's CMake defines no such library" in out
    full = build_of(settings={**BuildOptions().settings, "torch_headers": "full"})
    full.log.write_text("-- vllm-cpu-builder: lean <torch/all.h> for _C\n")
    steps_module._check_configured(full)  # not asked for: not read
    out = capsys.readouterr().out
    assert full.facts.lean_torch_headers == () and "no lean" not in out
    # no level said: the build type's own, and a warning when another was asked for
    assert full.facts.opt_level == "O3"
    assert "compiled at CMake's level for Release, not -O2" in out
