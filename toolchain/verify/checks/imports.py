"""The `import` check: nothing shadows vllm; vLLM picks its CPU platform; names intact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.util import run
from toolchain.verify.checks import Check
from toolchain.verify.kernels import find_package
from toolchain.verify.results import CheckResult, Findings
from toolchain.verify.shadowing import check_shadowing

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_import(ctx: Context) -> CheckResult:
    state = ctx.state
    return check_import(state.python, ctx.facts, state.options.project, ctx.env, ctx.console)


def check_import(
    python: Path, facts: Mapping[str, Any], project: Path, env: Mapping[str, str], console: str
) -> CheckResult:
    """Nothing in the user's folder shadows vllm; vLLM picks its CPU platform; names intact."""
    found = Findings()
    shadows = [str(shadow) for shadow in check_shadowing(project, env.get("PYTHONPATH", ""))]
    location = find_package(python, project, env)
    if location != facts["vllm_package"]:
        found.fail(
            f"run from {project}, `import vllm` finds {location or 'nothing'} instead of "
            f'{facts["vllm_package"]} ({"; ".join(shadows) or "PYTHONPATH"}): "cannot import '
            f"name 'LLM' from 'vllm' ({location or 'unknown location'})\"",
            "run your scripts from another folder, or rename that vllm folder/module",
        )
    elif shadows:  # a folder without __init__.py: the installed package still wins here
        found.warn(
            f"{'; '.join(shadows)}: harmless with this environment, but a Python without vLLM "
            "run there fails with \"cannot import name 'LLM' from 'vllm' (unknown location)\"",
            "rename the folder, or always run with this environment's Python",
        )
    platform = facts["platform"]
    if platform["device_type"] != "cpu":
        found.fail(
            f"vLLM did not pick its CPU platform ({platform['device_type'] or platform['error']})",
            "its installed version must contain 'cpu' (e.g. 0.32.0+cpu), or export "
            "VLLM_TARGET_DEVICE=cpu",
        )
    distributions = facts["vllm_distributions"]
    if "vllm" not in distributions:
        names = ", ".join(f"{n} {v}" for n, v in distributions.items())
        found.warn(
            f"installed as {names}, not 'vllm': importlib.metadata.version('vllm') fails, so "
            f"the `vllm` command {console}, `vllm run-batch` and plugins "
            "that ask for vllm's version break, and pip may install a second vllm beside it",
            "start the server with `python -m vllm.entrypoints.openai.api_server` instead "
            "of `vllm serve`; install a wheel named vllm to get the command back",
        )
    elif "cpu" not in (distributions["vllm"] or ""):
        found.warn(
            f"version {distributions['vllm']} lacks 'cpu'",
            "export VLLM_TARGET_DEVICE=cpu wherever vLLM runs, or retag the wheel +cpu",
        )
    details = {
        "installed_at": facts["vllm_package"],
        "imports_from_project": location,
        "distributions": distributions,
    }
    summary = f"vllm imports from {facts['vllm_package']}; CPU platform picked"
    return found.result("import", summary, details)


def console_state(python: Path, env: Mapping[str, str]) -> str:
    """'works', 'is missing' or 'fails (...)': the `vllm` command of the environment."""
    command = python.with_name("vllm")
    if not command.is_file():
        return "is missing"
    done = run.capture([command, "--version"], cwd=Path("/"), env=env, check=False, timeout=300)
    last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
    return f"fails ({last[0][:120]})" if done.returncode else "works"


CHECK = Check(name="import", order=50, run=run_import)
