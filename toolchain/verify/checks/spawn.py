"""The `spawn` check: scripts start no engine at import time; the engine started under spawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolchain.verify.checks import Check
from toolchain.verify.results import FAIL, PASS, SKIP, CheckResult
from toolchain.verify.spawn_lint import Finding, lint_scripts

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_spawn(ctx: Context) -> CheckResult:
    scripts = ctx.state.options.scripts
    generated = ctx.results.get("generate")
    proof = dict(generated.details) if generated else None
    return check_spawn(lint_scripts(scripts), len(scripts), proof)


def check_spawn(
    findings: Sequence[Finding], scripts: int, engine: Mapping[str, Any] | None
) -> CheckResult:
    """Scripts start no engine at import time; the engine itself started under spawn."""
    details = {"scripts": scripts, "findings": [str(f) for f in findings], "engine": engine}
    started = bool(engine and engine.get("started"))
    method = (engine or {}).get("start_method")
    engine_words = (
        f"the engine started with the {method} start method"
        if started
        else "the engine was not started (see generate)"
        if engine
        else "the engine was not started (generate not run)"
    )
    if findings:
        return CheckResult(
            name="spawn",
            status=FAIL,
            details=details,
            summary=f"{len(findings)} engine start(s) outside a __main__ guard: "
            + "; ".join(f"{f.path}:{f.line} {f.call}" for f in findings),
            fix='move them into a function called under `if __name__ == "__main__":` '
            "(vLLM's CPU workers are spawned and import the script again)",
        )
    linted = f"{scripts} script(s) have a __main__ guard" if scripts else "no --script given"
    status = PASS if started and method == "spawn" else FAIL if started else SKIP
    return CheckResult(
        name="spawn", status=status, summary=f"{engine_words}; {linted}", details=details
    )


CHECK = Check(name="spawn", order=90, run=run_spawn, needs=("generate",))
