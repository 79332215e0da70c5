"""The wheel and its requirements in a venv inside the emulated root, installed by the host's pip
for the root's platform (`--target`, `--platform`): nothing of pip runs under qemu. The host
compiles the bytecode when its Python has the root's minor version (same magic number)."""

from __future__ import annotations

import compileall
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from toolchain.emulate.models import RootSpec
from toolchain.emulate.root import RootPlan
from toolchain.errors import ProcessFailedError
from toolchain.runtime_deps import PipSources, RuntimePlan, runtime_requirements
from toolchain.util import run
from toolchain.util.report import reporter

VENV_IN_ROOT = Path("/opt/vcb-verify/venv")


@dataclass(frozen=True, kw_only=True)
class TorchChoice:
    requirement: str
    note: str  # said in the install check: which torch ran, and why that one
    substitute: bool  # not the build the wheel asks for


def platform_args(spec: RootSpec) -> list[str]:
    """pip's options for the root's platform: every manylinux tag its glibc accepts."""
    args = ["--only-binary=:all:", "--python-version", spec.python, "--implementation", "cp"]
    for platform in spec.wheel_platforms:
        if platform.startswith("manylinux_2_"):
            major, minor, arch = platform.removeprefix("manylinux_").split("_", 2)
            args += [f"--platform=manylinux_{major}_{m}_{arch}" for m in range(17, int(minor) + 1)]
            args.append(f"--platform=manylinux2014_{arch}")
        else:
            args.append(f"--platform={platform}")
    abi = f"cp{spec.python.replace('.', '')}"
    return [*args, "--abi", abi, "--abi", "abi3", "--abi", "none"]


def requirements_for(wheel: Path, spec: RootSpec) -> RuntimePlan:
    """The wheel's requirements as the root's Python evaluates their markers."""
    environment = {
        "platform_machine": spec.arch,
        "python_version": spec.python,
        "python_full_version": f"{spec.python}.0",
    }
    return runtime_requirements(wheel, environment)


def choose_torch(
    deps: RuntimePlan, spec: RootSpec, sources: PipSources, scratch: Path, log: Path
) -> tuple[RuntimePlan, TorchChoice | None]:
    """The torch the wheel asks for when pip finds it (find-links, the torch index); else the
    same version from PyPI (on aarch64 a CUDA build: its CUDA libraries install but never run)."""
    index = next(
        (
            i
            for i, line in enumerate(deps.install)
            if canonicalize_name(Requirement(line).name) == "torch"
        ),
        None,
    )
    if index is None:
        return deps, None
    wanted = Requirement(deps.install[index])
    try:
        run.run_logged(
            [sys.executable, "-m", "pip", "download", "--no-deps", *platform_args(spec),
             *sources.args(), "--dest", scratch, str(wanted)],
            log=log,
            what=f"looking for {wanted} for {spec.arch}",
        )  # fmt: skip
        return deps, TorchChoice(requirement=str(wanted), note=str(wanted), substitute=False)
    except ProcessFailedError:
        pass
    pins = [s for s in wanted.specifier if s.operator == "==" and "+" in s.version]
    if not pins:
        return deps, TorchChoice(requirement=str(wanted), note=str(wanted), substitute=False)
    public = pins[0].version.split("+")[0]
    note = (
        f"torch=={public} from PyPI instead of {wanted}, which no --find-links folder or "
        "reachable torch index has for this platform (its CUDA libraries are installed and "
        "never used: there is no GPU under qemu)"
    )
    install = list(deps.install)
    install[index] = f"torch=={public}"
    return replace(deps, install=tuple(install)), TorchChoice(
        requirement=f"torch=={public}", note=note, substitute=True
    )


def install_into_root(
    wheel: Path, plan: RootPlan, deps: RuntimePlan, sources: PipSources, log: Path
) -> Path:
    """A new venv at VENV_IN_ROOT (any old one removed) with the wheel and `deps`; its path in
    the host's view."""
    spec = plan.spec
    venv = plan.path / VENV_IN_ROOT.relative_to("/")
    shutil.rmtree(venv, ignore_errors=True)
    python = f"/usr/bin/python{spec.python}"
    run.run_logged(
        ["chroot", plan.path, python, "-m", "venv", "--without-pip", VENV_IN_ROOT],
        log=log,
        what="creating the venv in the emulated root",
    )
    site = venv / "lib" / f"python{spec.python}" / "site-packages"
    if deps.install:  # pip refuses an empty list ("You must give at least one requirement")
        run.run_logged(
            [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
             "--target", site, *platform_args(spec), *sources.args(), *deps.install],
            log=log,
            what=f"installing the requirements of {wheel.name} for {spec.arch}",
        )  # fmt: skip
        _move_scripts(site / "bin", venv / "bin")  # before the next --target skips a bin/
    # Its own torch pin (+cpu) is what a substitute torch replaces: the wheel goes in alone.
    run.run_logged(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
         "--no-deps", "--target", site, *platform_args(spec), wheel],
        log=log,
        what=f"installing {wheel.name}",
    )  # fmt: skip
    _move_scripts(site / "bin", venv / "bin")
    _compile(site, spec)
    return venv


def _move_scripts(source: Path, bin_dir: Path) -> None:
    """pip --target writes console scripts for the host's Python: point them at the venv's."""
    if not source.is_dir():
        return
    for script in source.iterdir():
        text = script.read_bytes()
        if text.startswith(b"#!"):
            text = f"#!{VENV_IN_ROOT}/bin/python".encode() + text[text.index(b"\n") :]
        target = bin_dir / script.name
        if not target.exists():
            target.write_bytes(text)
            target.chmod(0o755)
    shutil.rmtree(source)


def _compile(site: Path, spec: RootSpec) -> None:
    """Bytecode, compiled here: `import torch` under qemu takes ~12 s with it, ~28 s without."""
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    if this != spec.python:
        reporter.outcome(
            f"not compiling bytecode here: this Python is {this}, the root's {spec.python} "
            "(each import under qemu compiles it instead, about twice as slow)"
        )
        return
    compileall.compile_dir(site, quiet=2, workers=0)
