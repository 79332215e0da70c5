"""The `generate` check: LLM.generate in the environment, retried once when memory is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.util.report import reporter
from toolchain.verify.checks import Check
from toolchain.verify.engine_checks import Engine, run_generate
from toolchain.verify.memflag import node_memory, reservation
from toolchain.verify.results import CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_generate_check(ctx: Context) -> CheckResult:
    return generate_with_retry(ctx.engines.engine, ctx.engines.attempts)


def generate_with_retry(engine: Engine, attempts: list[dict[str, Any]]) -> CheckResult:
    """generate; when vLLM refuses the memory setting, once more with a setting that fits now.

    The memory check reports the refusal; the retry still proves generate, spawn and serve.
    """
    result = run_generate(engine)
    attempts.append(dict(result.details))
    if not result.details.get("memory_refused"):
        return result
    lower = reservation(node_memory(), engine.utilization).recommended_utilization
    if not 0 < lower < engine.utilization:
        return result
    reporter.outcome(
        f"vLLM refused --gpu-memory-utilization {engine.utilization} "
        f"({result.details.get('memory_seen') or 'see the log'}); retrying with {lower}"
    )
    refused_log = Path(result.details["log"]).with_name("generate-refused.log")
    Path(result.details["log"]).replace(refused_log)
    attempts[0]["log"] = str(refused_log)
    retry = run_generate(replace(engine, utilization=lower))
    attempts.append(dict(retry.details))
    refused = f"vLLM refused --gpu-memory-utilization {engine.utilization}"
    return replace(
        retry,
        summary=f"with --gpu-memory-utilization {lower} after {refused}: {retry.summary}",
        details={**retry.details, "refused_first": attempts[0]},
    )


CHECK = Check(name="generate", order=70, run=run_generate_check, engine=True)
