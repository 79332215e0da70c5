"""The build steps, one function each, and the registry that `build_wheel` runs them from."""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from toolchain.compile.compilation import EtaBasis, MemoryGuard, compile_logged
from toolchain.compile.cross import provision_cross, target_torch
from toolchain.compile.debuginfo import split_debug_info
from toolchain.compile.manifest import manifest, write_manifest
from toolchain.compile.ninja_trace import write_trace
from toolchain.compile.preflight import (
    PATCHELF_FIX,
    check_writable,
    patchelf_too_old,
    writable_folders,
)
from toolchain.compile.progress import (
    cache_hit_rate,
    ci_group,
    learned_cpu_per_unit,
    step_summary,
)
from toolchain.compile.provision import provision_gxx
from toolchain.compile.runner import BuildRun, StepFunction, run_steps
from toolchain.compile.shared_cache import count, sccache, start_cache, stop, without_cache
from toolchain.compile.sources import fetch_sdist
from toolchain.detect.tools import numa_header, tool_version
from toolchain.errors import (
    BuildError,
    SourceError,
    ToolchainError,
    UnsupportedHostError,
)
from toolchain.plan.buildplan import BuildPlan
from toolchain.plan.earlier import builds_like
from toolchain.plan.recipes import OnednnPrune, Patch
from toolchain.plan.switches import TORCH_LEAN, lean_header_dir
from toolchain.runtime_deps import PipSources
from toolchain.settings import BUILD_TYPE_LEVEL, level_to_pass
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.util.files import MARKER as UNPACK_MARKER
from toolchain.util.files import (
    atomic_path,
    file_lock,
    sha256_file,
    tar_sha256,
    unpack_tar,
)
from toolchain.util.index_env import secret_indexes_to_env, with_env
from toolchain.util.net import github_reachable
from toolchain.util.report import duration, reporter
from toolchain.util.source_lock import check_archive
from toolchain.util.units import GIB, MIB
from toolchain.wheelfile import rewrite_wheel, wheel_version

# torch's own libraries come with torch at run time; auditwheel must not copy them into the wheel.
TORCH_LIBRARIES = (
    "libtorch*.so*",
    "libc10*.so*",
    "libshm*.so*",
    "libgomp*.so*",
    "libtorch_python.so",
)
PATCHED_MARKER = ".vcb-patched"
VENV_MARKER = ".vcb-venv-complete"


def fetch_source(build: BuildRun) -> None:
    plan, source = build.plan, build.plan.source
    if source.path is not None:
        reporter.detail(f"building the tree at {source.path}")
        return
    assert source.sha256 is not None and source.cache is not None
    sdist = fetch_sdist(
        sdist=source.sdist,
        sha256=source.sha256,
        cache=source.cache,
        index_url=build.options.index_url,
        mirror=source.mirror,
    )
    reporter.detail(f"{sdist.name}: sha256 {source.sha256} matches the recipe")
    # The patch set is part of the stamp: changed patches go onto a fresh tree, not the patched one.
    stamp = "\n".join([source.sha256, *(p.sha256 for p in plan.patches)])
    unpacked = plan.paths.src / UNPACK_MARKER
    before = unpacked.read_text().strip() if unpacked.is_file() else ""
    if before.partition("\n")[0] == source.sha256 and before != stamp:
        reporter.detail("the recipe's patches changed since this tree was patched: unpacking again")
    unpack_tar(sdist, plan.paths.src, stamp=stamp)


def apply_patches(build: BuildRun) -> None:
    """Apply the recipe's patches once to the unpacked sdist; a failure forces a fresh unpack."""
    src = build.plan.paths.src
    marker = src / PATCHED_MARKER
    wanted = "\n".join(p.sha256 for p in build.plan.patches)
    if marker.is_file() and marker.read_text() == wanted:
        reporter.detail("already applied")
        return
    try:
        for patch in build.plan.patches:
            run.run_logged(
                ["patch", "-p1", "--forward", "--batch", "-i", recipe_file(build, patch)],
                log=build.log,
                cwd=src,
                what=f"applying {patch.file.name}",
            )
    except ToolchainError:
        (src / UNPACK_MARKER).unlink(missing_ok=True)
        raise
    marker.write_text(wanted)


def recipe_file(build: BuildRun, loaded: Patch | OnednnPrune) -> Path:
    """The recipe's file as it was read (and hashed) when the recipe was loaded, written into the
    build folder: a file changed since cannot be used under the old one's hash."""
    copy = build.plan.paths.recipe_files / loaded.file.name
    with atomic_path(copy) as temporary:
        temporary.write_bytes(loaded.content)
    return copy


def lean_torch_header(build: BuildRun) -> None:
    """The toolkit's lean <torch/all.h> written where CMAKE_ARGS names it (lean_header_dir)."""
    copy = lean_header_dir(build.plan.paths.recipe_files) / "torch" / "all.h"
    copy.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(copy) as temporary:
        temporary.write_bytes((TORCH_LEAN / "torch" / "all.h").read_bytes())


def third_party_sources(build: BuildRun) -> None:
    plan = build.plan
    if any(d.mirror_file is None for d in plan.third_party):
        if github_reachable():
            reporter.detail("no mirror given: cmake downloads them from GitHub")
            return
        lines = [
            f"  {d.archive}  tar sha256 {d.tar_sha256 or '(not recorded)'}"
            for d in plan.third_party
        ]
        raise SourceError(
            "GitHub is unreachable and no source mirror was given; cmake would fail to download:\n"
            + "\n".join(lines),
            hint="put those files in a folder and pass --sources DIR (or VCB_SOURCES); "
            f"`nox -s fetch-sources -- --vllm {plan.vllm_version} --to DIR` fills one on a "
            "connected machine",
        )
    for dep in plan.third_party:
        archive, unpacked = dep.mirror_file, dep.unpacked
        assert archive is not None and unpacked is not None
        if not archive.is_file():
            raise SourceError(
                f"{archive} is missing (expected tar sha256 "
                f"{dep.tar_sha256 or 'not recorded: trusted on first use'})",
                hint=f"copy {dep.archive} of {dep.name} {dep.ref} into "
                f"{archive.parent}, or fill it with `nox -s fetch-sources`",
            )
        found = tar_sha256(archive)
        checked = check_archive(
            name=dep.name,
            ref=dep.ref,
            archive=archive,
            recipe_sha256=dep.tar_sha256,
            found=found,
            recipe=Path(plan.recipe).name,
        )
        unpack_tar(archive, unpacked, stamp=found)
        reporter.detail(f"{dep.name} {dep.ref}: {checked}; unpacked at {unpacked}")


def provision_toolchain(build: BuildRun) -> None:
    plan = build.plan
    if plan.cross is not None:
        build.facts.cross = provision_cross(plan.cross, plan.paths.work_dir, log=build.log)
        return
    provision_gxx(plan.paths.work_dir, plan.arch, log=build.log)


def check_toolchain(build: BuildRun) -> None:
    plan = build.plan
    version = tool_version(plan.compiler.cxx)
    minimum = plan.compiler.minimum
    if version is None:
        raise BuildError(
            f"{plan.compiler.cxx} does not run or report a version",
            hint="check --cxx / CXX, or remove it to let the toolkit choose",
        )
    if minimum and Version(version) < Version(minimum):
        raise BuildError(
            f"{plan.compiler.cxx} is g++ {version}; vLLM {plan.vllm_version} on "
            f"{plan.arch} needs >= {minimum}",
            hint="unset CXX / --cxx so the toolkit provisions a new enough g++",
        )
    cross = plan.cross
    if cross is not None and not (cross.sysroot / "usr" / "include" / "numa.h").is_file():
        raise BuildError(
            f"numa.h is missing from the sysroot {cross.sysroot}",
            hint="run the provision-toolchain step again (delete the sysroot folder first)",
        )
    if cross is None and numa_header() is None:
        raise BuildError(
            "numa.h is missing: vLLM's CPU backend links libnuma",
            hint="apt-get install libnuma-dev",
        )
    # the repair step runs after the compile: its patchelf is checked now, not an hour later
    patchelf = run.own_program("patchelf")
    if too_old := patchelf_too_old(patchelf):
        raise BuildError(too_old, hint=PATCHELF_FIX)
    build.facts.cxx_version = version
    reporter.detail(f"g++ {version} at {plan.compiler.cxx}; numa.h found; {patchelf}")


def create_venv(build: BuildRun) -> None:
    """A venv that is marked finished only once its pip runs; an unfinished one is made anew."""
    paths = build.plan.paths
    marker = paths.venv / VENV_MARKER
    if marker.is_file():
        reporter.detail(f"reusing {paths.venv}")
        return
    if paths.venv.exists():
        reporter.detail(f"{paths.venv} was left unfinished (interrupted?): making it anew")
        shutil.rmtree(paths.venv)
    run.run_logged(
        [build.plan.python.interpreter, "-m", "venv", paths.venv],
        log=build.log,
        what="creating the build venv",
    )
    run.capture([paths.venv_python, "-m", "pip", "--version"], timeout=120)
    marker.write_text("finished\n")


def cuda_toolkit(environ: Mapping[str, str]) -> Path | None:
    """The nvcc a CUDA torch's CMake package would find (CUDA_HOME, CUDA_PATH, PATH), or None."""
    for variable in ("CUDA_HOME", "CUDA_PATH", "CUDA_TOOLKIT_ROOT_DIR"):
        if environ.get(variable) and (Path(environ[variable]) / "bin" / "nvcc").is_file():
            return Path(environ[variable]) / "bin" / "nvcc"
    found = shutil.which("nvcc", path=environ.get("PATH", ""))
    return Path(found) if found else None


def install_requirements(build: BuildRun) -> None:
    plan, python, torch = build.plan, build.plan.paths.venv_python, build.plan.torch
    pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    sources = PipSources(find_links=torch.find_links, torch_index=torch.index_url)
    if not sources.torch_index_reachable:
        reporter.detail(
            f"{torch.index_url} is unreachable: torch must come from --find-links "
            "or pip's own configuration"
        )
    argv, extra = secret_indexes_to_env([*map(str, pip), *sources.args(), torch.requirement])
    run.run_logged(
        argv,
        log=build.log,
        env=with_env(os.environ, extra),
        what=f"installing {torch.requirement}",
    )
    probe = run.capture(
        [
            python,
            "-c",
            "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))",
        ],
        timeout=300,
    )
    version, cuda = parse_json(
        probe.stdout.strip().rpartition("\n")[2], where=f"{python}'s torch", error=BuildError
    )
    wanted = torch.version
    if cuda is not None and not build.options.allow_cuda_torch:
        raise BuildError(
            f"the build venv got torch {version}, a CUDA {cuda} build: it would put "
            "gigabytes of CUDA libraries into every CPU install",
            hint="give the PyTorch CPU index (--torch-index) or a folder with the "
            "+cpu wheel (--find-links); --allow-cuda-torch accepts it anyway",
        )
    if cuda is not None:
        toolkit = cuda_toolkit(os.environ)
        if toolkit is None:
            raise BuildError(
                f"the build venv got torch {version}, a CUDA {cuda} build, and this machine has "
                "no CUDA toolkit (no nvcc on PATH or under CUDA_HOME): torch's CMake package "
                "(Caffe2Config.cmake) stops vLLM's configure without one",
                hint="give the +cpu wheel (--find-links FOLDER, or --torch-index); a CUDA torch "
                "builds only where the CUDA toolkit is installed",
            )
        reporter.detail(f"torch {version} is a CUDA {cuda} build; CUDA toolkit at {toolkit}")
    if not SpecifierSet(f"=={wanted}").contains(version, prereleases=True):
        raise BuildError(f"the build venv has torch {version}; the plan pins {wanted}")
    build.facts.torch = version
    run.run_logged(
        [*pip, *plan.build_requires], log=build.log, what="installing build requirements"
    )
    for include in plan.paths.venv.glob("lib/python*/site-packages/*/include"):
        same_mtime(include)
    check_build_tools(build)


def same_mtime(folder: Path) -> None:
    """Give every file under `folder` the newest one's modification time.

    g++ treats two `#pragma once` headers with the same contents and the same modification time
    as one file and reads only the first. torch ships such twins, and pip stamps each file as it
    unpacks it, so whether a twin is skipped depended on the second the install happened in: the
    preprocessed units differed from machine to machine and a shared cache missed every vLLM
    kernel. With one time for all, every machine skips the same twins; the newest time keeps
    ninja's view of what changed."""
    files = [path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()]
    if files:
        newest = max(path.stat().st_mtime_ns for path in files)
        for path in files:
            os.utime(path, ns=(newest, newest))


def check_build_tools(build: BuildRun) -> None:
    """cmake and ninja as the build will find them: the venv's, first on PATH."""
    bin_dir = build.plan.paths.venv / "bin"
    versions = {name: tool_version(bin_dir / name) for name in ("cmake", "ninja")}
    for name, version in versions.items():
        if version is None:
            raise BuildError(
                f"{bin_dir / name} is missing after installing the build requirements",
                hint=f"check {build.log}",
            )
    cmake = versions["cmake"] or "0"
    if build.plan.cmake_min and Version(cmake) < Version(build.plan.cmake_min):
        raise BuildError(
            f"cmake {cmake} in the build venv; vLLM {build.plan.vllm_version} needs "
            f">= {build.plan.cmake_min}",
            hint="check the recipe's build requirements",
        )
    build.facts.build_tools = versions
    reporter.detail(f"cmake {versions['cmake']}, ninja {versions['ninja']} (from the build venv)")


def target_torch_step(build: BuildRun) -> None:
    """A cross build: the host machine's torch, its CUDA-free view, the files cmake reads."""
    plan = build.plan
    assert plan.cross is not None, "only cross plans have this step"
    sources = PipSources(find_links=plan.torch.find_links, torch_index=plan.torch.index_url)
    build.facts.target_torch = target_torch(
        plan.cross,
        plan.paths.venv_python,
        download_to=plan.paths.work_dir / "target-wheels",
        pip_args=sources.args(),
        log=build.log,
    )


def compile_env(build: BuildRun) -> dict[str, str]:
    plan = build.plan
    env = {**os.environ, **plan.env}
    env["PATH"] = f"{plan.paths.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    cache = build.facts.cache
    return without_cache(env) if cache is not None and not cache["used"] else env


def start_cache_step(build: BuildRun) -> None:
    start_cache(build, compile_env(build))


def compile_step(build: BuildRun) -> None:
    plan, dist = build.plan, build.plan.paths.build_dir / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    margin, resume = plan.jobs.guard_bytes()
    guard = MemoryGuard(margin_bytes=margin, resume_bytes=resume)
    env = compile_env(build)
    if plan.onednn_prune is not None:
        recipe_file(build, plan.onednn_prune)  # the list CMAKE_ARGS names
    if plan.torch_headers == "lean":
        lean_torch_header(build)
    try:
        build.facts.compile = compile_logged(
            [plan.paths.venv_python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
             "-v", "-w", dist, plan.source_folder],
            env=env,
            cwd=plan.source_folder,
            log=build.log,
            guard=guard,
            servers=[sccache(plan)] if build.facts.cache_used else [],
            eta=EtaBasis(
                cpu_per_unit=learned_cpu_per_unit(builds_like(plan)),
                jobs=plan.max_jobs,
            ),
        )  # fmt: skip
        if build.facts.cache_used:
            count(build, env)
    finally:
        stop(build, env)
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"the compile left {len(wheels)} wheels in {dist}, expected one")
    if wheel_version(wheels[0]) != plan.wheel_version:
        raise BuildError(
            f"{wheels[0].name} is not version {plan.wheel_version}: the source did "
            "not honour VLLM_VERSION_OVERRIDE"
        )
    build.facts.built_wheel = wheels[0]
    _check_configured(build)


# vllm-libraries.cmake's status lines (vLLM's cmake output goes into the build log)
OPT_LINE = re.compile(r"vllm-cpu-builder: -(O\w+) for vLLM's libraries")
LEAN_LINE = re.compile(r"vllm-cpu-builder: lean <torch/all\.h> for ([\w,]*)")
PRECOMPILED_LINE = re.compile(r"vllm-cpu-builder: <torch/all\.h> precompiled for ([\w,]*)")
OWN_HEADERS_LINE = re.compile(
    r"vllm-cpu-builder: (\w+)'s (\S+) compiles torch's headers itself: (.*)"
)


def _check_configured(build: BuildRun) -> None:
    """The manifest names the optimisation level of vLLM's libraries, those that got the lean
    <torch/all.h> and those whose headers were precompiled (with the units that compile them
    themselves, and why), as the last configure said, not as asked: vLLM's CMake may not have
    taken the file at all (a top project not named vllm_extensions) or may lack a library."""
    plan, log = build.plan, build.log.read_text(errors="replace")
    build.facts.opt_level = BUILD_TYPE_LEVEL.get(plan.build_type)
    if level_to_pass(plan.build_type, plan.opt_level):
        levels = OPT_LINE.findall(log)
        if levels:
            build.facts.opt_level = levels[-1]
        else:
            reporter.warning(
                f"vLLM's libraries compiled at CMake's level for {plan.build_type}, not "
                f"-{plan.opt_level}: vLLM's CMake never read vllm-libraries.cmake"
            )
    if plan.torch_headers == "lean":
        build.facts.lean_torch_headers = _configured(
            log, LEAN_LINE, plan.kernel_tiers or ("_C",), "lean <torch/all.h>"
        )
    if plan.precompiled_headers:
        build.facts.precompiled_headers = _configured(
            log, PRECOMPILED_LINE, plan.precompiled_headers, "precompiled torch headers"
        )
        # the last configure's: its lines come before its own summary line
        ends = [match.start() for match in PRECOMPILED_LINE.finditer(log)]
        said = log[ends[-2] if len(ends) > 1 else 0 : ends[-1]] if ends else ""
        build.facts.own_torch_headers = {
            f"{target}/{unit}": why for target, unit, why in OWN_HEADERS_LINE.findall(said)
        }


def _configured(
    log: str, line: re.Pattern[str], asked: tuple[str, ...], what: str
) -> tuple[str, ...]:
    """The libraries the last configure's status `line` names; a warning for those `asked` of
    it that it does not."""
    found = line.findall(log)
    done = tuple(name for name in found[-1].split(",") if name) if found else ()
    missing = [name for name in asked if name not in done]
    if missing:
        reporter.warning(
            f"no {what} for {', '.join(missing)}: "
            + ("vLLM's CMake never read vllm-libraries.cmake (is its top project vllm_extensions?)"
               if not found else "vLLM's CMake defines no such library")
        )  # fmt: skip
    return done


def repair(build: BuildRun) -> None:
    """auditwheel repair: bundle what the target may lack (libnuma), never torch's libraries."""
    with ci_group("repair"):
        _repair(build)


def _repair(build: BuildRun) -> None:
    plan = build.plan
    built = build.facts.built_wheel
    if built is None:
        raise BuildError("repair needs the compiled wheel, but the compile step did not run")
    out = plan.paths.build_dir / "repaired"
    shutil.rmtree(out, ignore_errors=True)
    site = next(plan.paths.venv.glob("lib/python*/site-packages"))
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": os.pathsep.join(
            str(p) for p in (site / "torch" / "lib", site / "torch.libs") if p.is_dir()
        ),
    }
    excludes = [arg for pattern in TORCH_LIBRARIES for arg in ("--exclude", pattern)]
    auditwheel: list[str | Path] = [sys.executable, "-m", "auditwheel"]
    if plan.cross is not None:
        # the target's libraries (libnuma) are in the sysroot; auditwheel is told the machine
        view_lib = plan.cross.torch_view / "torch" / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            str(p) for p in (plan.cross.sysroot / "usr" / "lib" / plan.cross.triplet, view_lib)
        )
        auditwheel = [sys.executable, "-m", "toolchain.compile.auditwheel_cross",
                      plan.cross.host_machine]  # fmt: skip
    env["PATH"] = run.own_scripts_first(env.get("PATH"))  # the patchelf check_toolchain checked
    run.run_logged(
        [*auditwheel, "repair", "-w", out, *excludes, built],
        log=build.log,
        env=env,
        what="auditwheel repair",
    )
    repaired = sorted(out.glob("*.whl"))
    if len(repaired) != 1:
        raise BuildError(f"auditwheel left {len(repaired)} wheels in {out}, expected one")
    if plan.build_type == "RelWithDebInfo":
        debug = out / f"{repaired[0].name}.debug.tar.gz"
        split = split_debug_info(repaired[0], debug, log=build.log)
        build.facts.debug_archive = debug if split else None
        reporter.detail(
            f"debug info of {len(split)} libraries moved to {debug.name}" if split else
            "no library had debug info to split out"
        )  # fmt: skip
    dropped = rewrite_wheel(
        repaired[0],
        drop=[d.name for d in plan.dropped_requirements],
        manifest=manifest(build, repaired[0].name),
    )
    build.facts.dropped = dropped
    for line in dropped:
        reporter.detail(f"left out of the wheel's requirements: {line}")
    build.facts.repaired_wheel = repaired[0]


def deliver(build: BuildRun) -> None:
    """Copy the wheel and its manifest into the wheel folder; readers never see half a file."""
    wheel, total = build.facts.repaired_wheel, time.monotonic() - build.started
    if wheel is None:
        raise BuildError("deliver needs the repaired wheel, but the repair step did not run")
    folder = build.plan.paths.wheel_dir
    final = folder / wheel.name
    with atomic_path(final) as temporary:
        shutil.copyfile(wheel, temporary)
    debug = build.facts.debug_archive
    if debug is not None:
        with atomic_path(folder / debug.name) as temporary:
            shutil.copyfile(debug, temporary)
    digest = sha256_file(final)
    write_manifest(build, final, digest, total)
    trace = write_compile_trace(build, folder / f"{wheel.name}.trace.json")
    compiled = build.facts.compile
    peak = (
        f", compile {compiled.cpu_seconds:,.0f} CPU-seconds, peak memory "
        f"{compiled.peak_rss_bytes / GIB:.1f} GiB"
        if compiled
        else ""
    )
    reporter.artifact(
        final,
        sha256=digest,
        size_mib=final.stat().st_size / MIB,
        lines=[
            f"built in {duration(total)}{peak}",
            *([f"debug info: {folder / debug.name}"] if debug is not None else []),
            *([f"compile timeline: {trace} (open it in ui.perfetto.dev)"] if trace else []),
        ],
    )
    build.facts.delivered = final
    step_summary(
        {
            "target": build.plan.target_isa,
            "wheel": f"`{final.name}`",
            "size": f"{final.stat().st_size / MIB:.1f} MiB",
            "CPU-s": f"{compiled.cpu_seconds:,.0f}" if compiled else "not compiled here",
            "peak memory": f"{compiled.peak_rss_bytes / GIB:.1f} GiB" if compiled else "",
            "cache hit rate": cache_hit_rate(build.facts.cache),
        }
    )


def write_compile_trace(build: BuildRun, destination: Path) -> Path | None:
    """The Chrome trace of the compile's last ninja run, or None without a ninja log."""
    logs = sorted((build.plan.source_folder / "build").glob("temp*/.ninja_log"))
    if not logs:
        reporter.detail("no .ninja_log in the build tree: no compile timeline")
        return None
    count = write_trace(logs[-1], destination)
    reporter.detail(f"compile timeline of {count} commands: {destination.name}")
    return destination


STEPS: dict[str, StepFunction] = {
    "fetch-source": fetch_source,
    "apply-patches": apply_patches,
    "third-party-sources": third_party_sources,
    "provision-toolchain": provision_toolchain,
    "check-toolchain": check_toolchain,
    "create-venv": create_venv,
    "install-build-requirements": install_requirements,
    "start-cache": start_cache_step,
    "target-torch": target_torch_step,
    "compile": compile_step,
    "repair": repair,
    "deliver": deliver,
}


def refuse_macos(plan: BuildPlan) -> None:
    """A macOS plan is not built by these steps: off a Mac there is no Apple clang or macOS SDK
    (no cross build to macOS), and on a Mac the steps (auditwheel, /proc, numa.h) are Linux's."""
    if plan.macos is None:
        return
    what = f"a vLLM {plan.vllm_version} wheel for macOS ({plan.macos.wheel_platform})"
    if platform.system() != "Darwin":
        raise UnsupportedHostError(
            f"this machine is {platform.system()}: it cannot build {what}; vLLM's macOS build "
            "needs Apple clang and the macOS SDK, and there is no cross build to macOS",
            hint="on the Mac: `nox -s plan -- --vllm VERSION` prints the environment to build "
            "with; build there with `pip wheel --no-build-isolation --no-deps` in it",
        )
    raise UnsupportedHostError(
        f"{what} is planned from this Mac, but build-wheel does not run macOS builds yet (its "
        "steps are Linux's: auditwheel, /proc, numa.h); not yet built on a Mac",
        hint="`nox -s plan` prints the environment and steps; run `pip wheel "
        "--no-build-isolation --no-deps` on the sdist in that environment",
    )


def check_inputs(build: BuildRun) -> None:
    """What the user named must be there before anything is downloaded or installed."""
    refuse_macos(build.plan)
    source, mirror = build.plan.source, build.plan.source.mirror
    if source.path is not None and not source.path.is_dir():
        raise BuildError(
            f"--source-dir {source.path} is not a folder",
            hint="give the vLLM checkout to build, or leave --source-dir out for the sdist",
        )
    if mirror is not None and not mirror.is_dir():
        what = "a file" if mirror.exists() else "missing"
        raise SourceError(
            f"--sources {mirror} is {what}: it must be the mirror folder",
            hint=f"fill one with `nox -s fetch-sources -- --vllm {build.plan.vllm_version} "
            "--to DIR` and pass that DIR",
        )


def build_wheel(build: BuildRun) -> Path:
    """Run every step of the plan, one build per build folder at a time; the delivered wheel."""
    check_inputs(build)
    check_writable(writable_folders(build.plan, build.options))
    with file_lock(build.plan.paths.build_dir / ".vcb-build.lock", what="build-wheel", wait=False):
        return run_steps(build, STEPS)
