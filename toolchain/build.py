"""Execute a BuildPlan: each step prints its name, runs, and reports its duration."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

from toolchain import __version__, run
from toolchain.compile import CompileStats, MemoryGuard, compile_logged
from toolchain.errors import BuildError, SourceError, ToolchainError
from toolchain.fetch import MARKER as UNPACK_MARKER
from toolchain.fetch import (
    atomic_path,
    fetch_sdist,
    github_reachable,
    sha256_file,
    tar_sha256,
    unpack_tar,
)
from toolchain.host import Host
from toolchain.memory import GIB, MIB
from toolchain.plan import BuildPlan
from toolchain.provision import provision_gxx
from toolchain.runtime_deps import PipSources
from toolchain.tools import numa_header, tool_version
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


@dataclass
class BuildRun:
    plan: BuildPlan
    host: Host
    index_url: str
    allow_cuda_torch: bool = False
    durations: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return Path(self.plan.paths["log"])

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        summary = next((s.summary for s in self.plan.steps if s.name == name), "")
        print(f"==> {name}: {summary}", flush=True)
        started = time.monotonic()
        yield
        self.durations[name] = round(time.monotonic() - started, 1)
        print(f"    {name} done in {_duration(self.durations[name])}", flush=True)


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def build_wheel(build: BuildRun) -> Path:
    """Run every step of the plan; returns the delivered wheel."""
    plan, started = build.plan, time.monotonic()
    Path(plan.paths["build_dir"]).mkdir(parents=True, exist_ok=True)
    print(f"building vLLM {plan.vllm_version} ({plan.wheel_version}); log: {build.log}")
    for warning in plan.warnings:
        print(f"warning: {warning}")
    steps: dict[str, Callable[[BuildRun], None]] = {
        "fetch-source": fetch_source,
        "apply-patches": apply_patches,
        "third-party-sources": third_party_sources,
        "provision-toolchain": provision_toolchain,
        "check-toolchain": check_toolchain,
        "create-venv": create_venv,
        "install-build-requirements": install_requirements,
        "compile": compile_step,
    }
    for step in plan.steps:
        if step.name in steps:
            with build.step(step.name):
                steps[step.name](build)
    with build.step("repair"):
        wheel = repair(build)
    with build.step("deliver"):
        delivered = deliver(build, wheel, total=time.monotonic() - started)
    return delivered


def fetch_source(build: BuildRun) -> None:
    plan, src = build.plan, Path(build.plan.paths["src"])
    if plan.source["kind"] == "source-dir":
        print(f"  building the tree at {plan.source['path']}")
        return
    sdist = fetch_sdist(
        sdist=plan.source["sdist"],
        sha256=plan.source["sha256"],
        cache=Path(plan.source["cache"]),
        index_url=build.index_url,
        mirror=Path(plan.source["mirror"]) if plan.source["mirror"] else None,
    )
    print(f"  {sdist.name}: sha256 {plan.source['sha256']} matches the recipe")
    unpack_tar(sdist, src, stamp=plan.source["sha256"])


def apply_patches(build: BuildRun) -> None:
    """Apply the recipe's patches once to the unpacked sdist; a failure forces a fresh unpack."""
    src = Path(build.plan.paths["src"])
    marker = src / PATCHED_MARKER
    wanted = "\n".join(p["sha256"] for p in build.plan.patches)
    if marker.is_file() and marker.read_text() == wanted:
        print("  already applied")
        return
    try:
        for patch in build.plan.patches:
            run.run_logged(
                ["patch", "-p1", "--forward", "--batch", "-i", patch["file"]],
                log=build.log,
                cwd=src,
                what=f"applying {Path(patch['file']).name}",
            )
    except ToolchainError:
        (src / UNPACK_MARKER).unlink(missing_ok=True)
        raise
    marker.write_text(wanted)


def source_folder(plan: BuildPlan) -> Path:
    return Path(plan.source["path"] if plan.source["kind"] == "source-dir" else plan.paths["src"])


def third_party_sources(build: BuildRun) -> None:
    plan = build.plan
    if any(d["mirror_file"] is None for d in plan.third_party):
        if github_reachable():
            print("  no mirror given: cmake downloads them from GitHub")
            return
        lines = [
            f"  {d['archive']}  tar sha256 {d['tar_sha256'] or '(not recorded)'}"
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
        archive = Path(dep["mirror_file"])
        if dep["tar_sha256"] is None:
            raise SourceError(
                f"the recipe records no hash for {dep['name']} {dep['ref']}; an "
                "unchecked source is not used",
                hint="run `nox -s fetch-sources` where the source is reachable "
                "and add tar_sha256 to the recipe",
            )
        if not archive.is_file():
            raise SourceError(
                f"{archive} is missing (expected tar sha256 {dep['tar_sha256']})",
                hint=f"copy {dep['archive']} of {dep['name']} {dep['ref']} into "
                f"{archive.parent}, or fill it with `nox -s fetch-sources`",
            )
        found = tar_sha256(archive)
        if found != dep["tar_sha256"]:
            raise SourceError(
                f"{archive} holds a tar with sha256 {found}; the recipe expects "
                f"{dep['tar_sha256']} ({dep['name']} {dep['ref']})",
                hint="replace it with the archive of exactly that tag",
            )
        unpack_tar(archive, Path(dep["unpacked"]), stamp=found)
        print(f"  {dep['name']} {dep['ref']}: hash matches, unpacked at {dep['unpacked']}")


def provision_toolchain(build: BuildRun) -> None:
    provision_gxx(Path(build.plan.paths["work_dir"]), build.plan.arch, log=build.log)


def check_toolchain(build: BuildRun) -> None:
    plan = build.plan
    version = tool_version(plan.compiler["cxx"])
    minimum = plan.compiler["minimum"]
    if version is None:
        raise BuildError(
            f"{plan.compiler['cxx']} does not run or report a version",
            hint="check --cxx / CXX, or remove it to let the toolkit choose",
        )
    if minimum and Version(version) < Version(minimum):
        raise BuildError(
            f"{plan.compiler['cxx']} is g++ {version}; vLLM {plan.vllm_version} on "
            f"{plan.arch} needs >= {minimum}",
            hint="unset CXX / --cxx so the toolkit provisions a new enough g++",
        )
    if numa_header() is None:
        raise BuildError(
            "numa.h is missing: vLLM's CPU backend links libnuma",
            hint="apt-get install libnuma-dev",
        )
    build.facts["cxx_version"] = version
    print(f"  g++ {version} at {plan.compiler['cxx']}; numa.h found")


def _venv_python(plan: BuildPlan) -> Path:
    return Path(plan.paths["venv"]) / "bin" / "python"


def create_venv(build: BuildRun) -> None:
    python = _venv_python(build.plan)
    if python.exists():
        print(f"  reusing {build.plan.paths['venv']}")
        return
    run.run_logged(
        [build.plan.python["interpreter"], "-m", "venv", build.plan.paths["venv"]],
        log=build.log,
        what="creating the build venv",
    )


def install_requirements(build: BuildRun) -> None:
    plan, python = build.plan, _venv_python(build.plan)
    pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    sources = PipSources(
        find_links=tuple(Path(link) for link in plan.torch["find_links"]),
        torch_index=plan.torch["index_url"],
    )
    if not sources.torch_index_reachable:
        print(
            f"  {plan.torch['index_url']} is unreachable: torch must come from --find-links "
            "or pip's own configuration"
        )
    run.run_logged(
        [*pip, *sources.args(), plan.torch["requirement"]],
        log=build.log,
        what=f"installing {plan.torch['requirement']}",
    )
    probe = run.capture(
        [
            python,
            "-c",
            "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))",
        ],
        timeout=300,
    )
    version, cuda = json.loads(probe.stdout.strip().splitlines()[-1])
    wanted = plan.torch["requirement"].split("==", 1)[1]
    if cuda is not None and not build.allow_cuda_torch:
        raise BuildError(
            f"the build venv got torch {version}, a CUDA {cuda} build: it would put "
            "gigabytes of CUDA libraries into every CPU install",
            hint="give the PyTorch CPU index (--torch-index) or a folder with the "
            "+cpu wheel (--find-links); --allow-cuda-torch accepts it anyway",
        )
    if version != wanted:
        raise BuildError(f"the build venv has torch {version}; the recipe pins {wanted}")
    build.facts["torch"] = version
    run.run_logged(
        [*pip, *plan.build_requires], log=build.log, what="installing build requirements"
    )
    check_build_tools(build)


def check_build_tools(build: BuildRun) -> None:
    """cmake and ninja as the build will find them: the venv's, first on PATH."""
    bin_dir = Path(build.plan.paths["venv"]) / "bin"
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
    build.facts["build_tools"] = versions
    print(f"  cmake {versions['cmake']}, ninja {versions['ninja']} (from the build venv)")


def compile_env(plan: BuildPlan) -> dict[str, str]:
    env = {**os.environ, **plan.env}
    env["PATH"] = f"{Path(plan.paths['venv']) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def compile_step(build: BuildRun) -> None:
    plan, dist = build.plan, Path(build.plan.paths["build_dir"]) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    jobs = plan.jobs
    margin = max(512 * MIB, jobs.reserve_bytes // 2)
    guard = MemoryGuard(margin_bytes=margin, resume_bytes=margin + jobs.memory_per_job_bytes)
    stats: CompileStats = compile_logged(
        [
            _venv_python(plan),
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-v",
            "-w",
            dist,
            source_folder(plan),
        ],
        env=compile_env(plan),
        cwd=source_folder(plan),
        log=build.log,
        guard=guard,
    )
    build.facts["compile"] = {
        "steps": stats.steps_total,
        "peak_rss_bytes": stats.peak_rss_bytes,
        "min_available_bytes": stats.min_available_bytes,
        "pauses": stats.pauses,
        "seconds": round(stats.seconds, 1),
    }
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"the compile left {len(wheels)} wheels in {dist}, expected one")
    if wheel_version(wheels[0]) != plan.wheel_version:
        raise BuildError(
            f"{wheels[0].name} is not version {plan.wheel_version}: the source did "
            "not honour VLLM_VERSION_OVERRIDE"
        )
    build.facts["built_wheel"] = str(wheels[0])


def repair(build: BuildRun) -> Path:
    """auditwheel repair: bundle what the target may lack (libnuma), never torch's libraries."""
    plan = build.plan
    built = Path(build.facts["built_wheel"])
    out = Path(plan.paths["build_dir"]) / "repaired"
    shutil.rmtree(out, ignore_errors=True)
    site = next(Path(plan.paths["venv"]).glob("lib/python*/site-packages"))
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": os.pathsep.join(
            str(p) for p in (site / "torch" / "lib", site / "torch.libs") if p.is_dir()
        ),
    }
    excludes = [arg for pattern in TORCH_LIBRARIES for arg in ("--exclude", pattern)]
    run.run_logged(
        [sys.executable, "-m", "auditwheel", "repair", "-w", out, *excludes, built],
        log=build.log,
        env=env,
        what="auditwheel repair",
    )
    repaired = sorted(out.glob("*.whl"))
    if len(repaired) != 1:
        raise BuildError(f"auditwheel left {len(repaired)} wheels in {out}, expected one")
    dropped = rewrite_wheel(
        repaired[0],
        drop=[d["name"] for d in plan.dropped_requirements],
        manifest=manifest(build, repaired[0].name),
    )
    build.facts["dropped"] = dropped
    for line in dropped:
        print(f"  left out of the wheel's requirements: {line}")
    return repaired[0]


def manifest(build: BuildRun, wheel_name: str) -> dict[str, Any]:
    plan, host = build.plan, build.host
    return {
        "tool": f"vllm-cpu-builder {__version__}",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "wheel": wheel_name,
        "vllm_version": plan.vllm_version,
        "wheel_version": plan.wheel_version,
        "recipe": Path(plan.recipe).name,
        "source": plan.source,
        "third_party": [
            {k: d[k] for k in ("name", "ref", "commit", "tar_sha256")} for d in plan.third_party
        ],
        "target_isa": plan.target_isa,
        "isa_model": plan.isa_model,
        "min_isa": list(plan.min_isa),
        "toolchain": {
            "cxx": plan.compiler["cxx"],
            "cxx_version": build.facts.get("cxx_version"),
            "compiler_origin": plan.compiler["origin"],
            "python": plan.python["version"],
            "torch": build.facts.get("torch"),
            **build.facts.get("build_tools", {}),
        },
        "env": plan.env,
        "host": {
            "arch": host.arch,
            "cpu_model": host.cpu_model,
            "isa_level": host.isa_level,
            "isa": sorted(k for k, v in host.isa.items() if v),
            "cpus_usable": host.cpus_usable,
            "memory_total_bytes": host.memory.total_bytes,
            "os": host.os_name,
            "glibc": host.glibc,
        },
        "jobs": {"max_jobs": plan.max_jobs, "limited_by": plan.jobs.limited_by},
        "compile": build.facts.get("compile"),
        "durations_seconds": dict(build.durations),
        "dropped_requirements": list(plan.dropped_requirements),
        "patches": [{"file": Path(p["file"]).name, "sha256": p["sha256"]} for p in plan.patches],
    }


def deliver(build: BuildRun, wheel: Path, *, total: float) -> Path:
    """Copy the wheel and its manifest into the wheel folder; readers never see half a file."""
    folder = Path(build.plan.paths["wheel_dir"])
    final = folder / wheel.name
    with atomic_path(final) as temporary:
        shutil.copyfile(wheel, temporary)
    digest = sha256_file(final)
    record = manifest(build, wheel.name) | {
        "wheel_sha256": digest,
        "wheel_size_bytes": final.stat().st_size,
        "total_seconds": round(total, 1),
    }
    with atomic_path(folder / f"{wheel.name}.manifest.json") as temporary:
        temporary.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(
        f"\n{final.name}\n  size    {final.stat().st_size / MIB:.1f} MiB\n"
        f"  sha256  {digest}\n  built in {_duration(total)}"
        + (
            f", peak memory {build.facts['compile']['peak_rss_bytes'] / GIB:.1f} GiB"
            if build.facts.get("compile")
            else ""
        )
    )
    return final
