"""A fresh environment for `verify`: a venv with the wheel and its runtime requirements."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename

from toolchain.errors import KernelCheckError, UsageError
from toolchain.runtime_deps import PipSources, RuntimePlan, runtime_requirements
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.util.index_env import secret_indexes_to_env, with_env
from toolchain.verify.kernels import SIGILL_CODES
from toolchain.verify.results import CheckResult, Findings
from toolchain.wheelfile import check_wheel

PROBE = Path(__file__).parent / "scripts" / "probe_env.py"


def wheel_from_index(index_url: str, package: str, dest: Path, log: Path) -> Path:
    """Download the wheel pip would pick for this machine from `index_url`, and from no other
    index: as with --isolated, no pip configuration file and no PIP_* variable of the caller
    applies, while the index itself (credentials and all) goes through PIP_INDEX_URL."""
    shutil.rmtree(dest, ignore_errors=True)  # the wheel of an earlier run is not this one
    dest.mkdir(parents=True)
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    argv, extra = secret_indexes_to_env([*download, "--index-url", index_url, "--dest", str(dest)])
    isolated = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    run.run_logged(
        [*argv, package],
        log=log,
        env={**isolated, "PIP_CONFIG_FILE": os.devnull, **extra},
        what=f"downloading {package} from {index_url}",
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise UsageError(f"expected one wheel from {index_url}, got {[w.name for w in wheels]}")
    return wheels[0]


def interpreter_for(wheel: Path) -> str:
    """A Python on PATH that can install `wheel`: this one when its tags allow."""
    tags = parse_wheel_filename(wheel.name)[3]
    versions = {t.interpreter[2:] for t in tags if t.interpreter.startswith("cp")}
    abi3 = any(t.abi == "abi3" for t in tags)
    this = f"{sys.version_info.major}{sys.version_info.minor}"
    if (
        not versions
        or this in versions
        or (abi3 and int(this[1:]) >= min(int(v[1:]) for v in versions))
    ):
        return sys.executable
    for version in sorted(versions):
        found = shutil.which(f"python{version[0]}.{version[1:]}")
        if found:
            return found
    raise UsageError(
        f"{wheel.name} needs CPython {', '.join(sorted(versions))}; none is on PATH",
        hint="install that Python (pyenv, apt) and run verify again",
    )


def create_env(wheel: Path, venv: Path, sources: PipSources, log: Path) -> RuntimePlan:
    """A new venv at `venv` (any old one removed) with the wheel and its requirements."""
    check_wheel(wheel)  # before the old venv goes: a wheel that cannot be read changes nothing
    shutil.rmtree(venv, ignore_errors=True)
    run.run_logged([interpreter_for(wheel), "-m", "venv", venv], log=log, what="creating the venv")
    deps = runtime_requirements(wheel)
    pip: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
    ]
    if deps.install:  # pip refuses an empty list ("You must give at least one requirement")
        argv, extra = secret_indexes_to_env([*map(str, pip), *sources.args(), *deps.install])
        run.run_logged(
            argv, log=log, env=with_env(os.environ, extra), what="installing requirements"
        )
    run.run_logged([*pip, "--no-deps", wheel], log=log, what=f"installing {wheel.name}")
    return deps


def probe(
    python: Path, cwd: Path, env: dict[str, str] | None = None, *, load_kernels: bool = False
) -> dict[str, Any]:
    """What probe_env.py reports about the vLLM install of `python`."""
    argv: list[str | Path] = [python, PROBE, *(["--load-kernels"] if load_kernels else [])]
    output = run.capture(argv, timeout=600, check=False, cwd=cwd, env=env)
    line = next((x for x in output.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        how = (
            "was killed by SIGILL"
            if output.returncode in SIGILL_CODES
            else f"failed (exit {output.returncode})"
        )
        last = (output.stderr or output.stdout).strip().splitlines()[-3:]
        raise KernelCheckError(
            f"{python} {how} importing torch and vllm{': ' if last else ''}{' | '.join(last)}",
            hint="install the wheel into that environment first (or let verify create one)",
        )
    report: dict[str, Any] = parse_json(
        line.removeprefix("RESULT "), where=f"{python}'s report", error=KernelCheckError
    )
    return report


def check_install(
    facts: dict[str, Any],
    *,
    manifest: dict[str, Any] | None,
    deps: RuntimePlan | None,
    substitute_torch: str = "",
) -> CheckResult:
    """torch is the CPU build the wheel was built against; no CUDA companions; drops named.

    `substitute_torch` says why another torch was installed on purpose (under emulation, when
    the CPU build is out of reach): a warning instead of the failures it would cause."""
    wanted = ((manifest or {}).get("toolchain") or {}).get("torch")
    found = Findings()
    if substitute_torch:
        found.warn(
            f"torch {facts['torch']} ran: {substitute_torch}",
            "give --find-links with the aarch64 torch +cpu wheel (PyTorch's CPU index) to verify "
            "with the torch users install",
        )
    elif facts["torch_cuda"]:
        found.fail(
            f"torch {facts['torch']} is a CUDA {facts['torch_cuda']} build",
            "install the +cpu build of torch (PyTorch CPU index or --find-links)",
        )
    if wanted and facts["torch"] != wanted and not substitute_torch:
        found.fail(
            f"torch is {facts['torch']}, the wheel was built against {wanted}",
            f"pip install torch=={wanted} (its kernels link to that torch's ABI)",
        )
    for name, info in facts["companions"].items():
        if info["import_error"]:
            found.fail(
                f"{name} {info['version']} fails to import: {info['import_error']}",
                f"pip uninstall {name} (PyPI's {name} is a CUDA build), or a CPU build",
            )
    if deps and deps.left_out:
        found.warn(
            f"left out {deps.describe_left_out()}",
            "install CPU builds of what was left out if a model needs them",
        )
    details = {
        "torch": facts["torch"],
        "companions": facts["companions"],
        "left_out": deps.left_out_by_reason() if deps else {},
    }
    build = "a CUDA build" if facts["torch_cuda"] else "CPU build"
    summary = f"torch {facts['torch']} ({build}); {', '.join(facts['vllm_distributions'])}"
    return found.result("install", summary, details)
