"""The frozen BuildPlan and its typed parts; `to_json` keeps the keys `plan --json` always had."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.plan.cross import CrossPlan
from toolchain.plan.jobs import JobSizing
from toolchain.plan.recipes import DroppedRequirement, OnednnPrune, Patch
from toolchain.util.compile_cache import SharedCache


def to_json(value: Any) -> Any:
    """Dataclasses as objects, paths as strings, tuples as lists: what json.dump writes."""
    if hasattr(value, "to_json") and not isinstance(value, type):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    summary: str


@dataclass(frozen=True, kw_only=True)
class PythonChoice:
    version: str
    interpreter: str
    requires: str


@dataclass(frozen=True, kw_only=True)
class TorchPin:
    requirement: str  # torch==X+cpu
    index_url: str
    find_links: tuple[Path, ...] = ()

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Compiler:
    cxx: str
    cc: str
    version: str
    origin: str  # "CXX / --cxx", "PATH" or "provisioned"
    minimum: str


@dataclass(frozen=True, kw_only=True)
class Source:
    """The vLLM source: the recipe's sdist (cache, mirror) or a --source-dir tree."""

    kind: str  # "sdist" or "source-dir"
    sha256: str | None
    path: Path | None = None
    sdist: str = ""
    cache: Path | None = None
    mirror: Path | None = None

    def to_json(self) -> dict[str, Any]:
        if self.kind == "source-dir":
            return {"kind": self.kind, "path": str(self.path), "sha256": self.sha256}
        return {
            "kind": self.kind,
            "sdist": self.sdist,
            "sha256": self.sha256,
            "cache": str(self.cache),
            "mirror": str(self.mirror) if self.mirror else None,
        }


@dataclass(frozen=True, kw_only=True)
class Dependency:
    """A third-party source cmake would download, and where the build takes it from instead."""

    name: str
    ref: str
    commit: str | None
    tar_sha256: str | None
    env: str
    archive: str
    mirror_file: Path | None
    unpacked: Path | None


@dataclass(frozen=True, kw_only=True)
class Paths:
    work_dir: Path
    build_dir: Path
    venv: Path
    src: Path
    deps: Path
    log: Path
    wheel_dir: Path

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def recipe_files(self) -> Path:
        """Where the build writes the recipe's files (a prune list) as they were read and hashed
        when the recipe was loaded: what the build uses is what the plan and manifest name."""
        return self.build_dir / "recipe-files"


@dataclass(frozen=True, kw_only=True)
class DistPlan:
    """Distributed compiles: the scheduler and what it had when the plan was made."""

    scheduler: str
    servers: int
    remote_cpus: int
    preprocess_bytes: int  # memory a job needs here while a build server compiles


@dataclass(frozen=True, kw_only=True)
class ExpectedCost:
    """The compile of the costliest earlier build like this one (plan/earlier.py), and its
    manifest."""

    cpu_seconds: float
    wall_seconds: float
    manifest: str


@dataclass(frozen=True, kw_only=True)
class MacosPlan:
    """What only a macOS build has (plan/darwin.py): the oldest macOS the wheel runs on, its tag."""

    deployment_target: str  # MACOSX_DEPLOYMENT_TARGET
    wheel_platform: str  # macosx_14_0_arm64
    build_macos: str | None  # the Mac's own macOS, when its dump says (kern.osproductversion)
    march: str | None  # the -march upstream's cmake compiles the kernels with
    clang_min: str


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    vllm_version: str
    recipe: str
    arch: str  # the host machine: the one the wheel is for
    build_arch: str  # the build machine: the one compiling
    cross: CrossPlan | None  # None: the two are one architecture
    arm_acl: bool | None  # Arm only: oneDNN with the Arm Compute Library
    target_isa: str
    isa_model: str
    min_isa: tuple[str, ...]
    target_note: str
    kernel_tiers: tuple[str, ...]  # empty: the era's one _C
    onednn_isa: str | None
    onednn_prune: OnednnPrune | None  # oneDNN units left out: the target never links them
    precompiled_headers: tuple[str, ...]  # the kernel libraries that compile torch's once
    torch_headers: str  # lean: vLLM's libraries get the toolkit's <torch/all.h>; full: torch's
    build_type: str
    opt_level: str  # GCC's -O level of vLLM's own libraries (O2, O3)
    expected: ExpectedCost | None
    wheel_version: str
    python: PythonChoice
    torch: TorchPin
    build_requires: tuple[str, ...]
    compiler: Compiler
    source: Source
    third_party: tuple[Dependency, ...]
    max_jobs: int
    jobs: JobSizing
    env: dict[str, str]
    paths: Paths
    steps: tuple[Step, ...]
    dropped_requirements: tuple[DroppedRequirement, ...] = ()
    patches: tuple[Patch, ...] = ()
    shared_cache: SharedCache | None = None
    dist: DistPlan | None = None
    cmake_min: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    macos: MacosPlan | None = None  # None: a Linux build

    @property
    def source_folder(self) -> Path:
        """What pip builds: the --source-dir tree, or the unpacked sdist."""
        return self.source.path if self.source.path is not None else self.paths.src

    def to_json(self) -> dict[str, Any]:
        data = {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["patches"] = [
            {"file": str(p.file), "sha256": p.sha256, "reason": p.reason, "arch": p.arch}
            for p in self.patches
        ]
        data["onednn_prune"] = self.onednn_prune and self.onednn_prune.record()
        if self.macos is None:
            del data["macos"]  # a Linux plan's JSON stays as it always was
        return data
