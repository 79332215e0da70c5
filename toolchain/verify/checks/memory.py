"""The `memory` check: what --gpu-memory-utilization reserves, and what an engine start proved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolchain.util.units import gib
from toolchain.verify.checks import Check
from toolchain.verify.memflag import NodeMemory, Reservation, describe_node
from toolchain.verify.results import FAIL, PASS, SKIP, WARN, CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_memory(ctx: Context) -> CheckResult:
    """Proven by generate's starts, unless they ran with a fixed KV cache (emulated)."""
    shared = ctx.engines
    proven = "generate" in ctx.results and not ctx.state.engine_kv_cache_bytes
    attempts = shared.attempts if proven else None
    return check_memory(shared.memory, shared.planned, shared.default, attempts)


def check_memory(
    memory: NodeMemory,
    planned: Reservation,
    default: Reservation,
    attempts: Sequence[Mapping[str, Any]] | None,
) -> CheckResult:
    """What the flag reserves, whether that leaves the margin, and what an engine start proved.

    `attempts` are generate's engine starts in order (the second a retry with a lower setting
    after vLLM refused the first); None when generate did not run.
    """
    advice = (
        f"--gpu-memory-utilization {planned.recommended_utilization:.2f} "
        f"(or VLLM_CPU_KVCACHE_SPACE={planned.recommended_kvcache_gib})"
    )
    details: dict[str, Any] = {
        "node": memory.node,
        "source": memory.source,
        "total_bytes": memory.total_bytes,
        "available_bytes": memory.available_bytes,
        "system_total_bytes": memory.system_total_bytes,
        "system_available_bytes": memory.system_available_bytes,
        "requested_bytes": planned.requested_bytes,
        "utilization": planned.utilization,
        "margin_bytes": planned.margin_bytes,
        "recommended": planned.recommended_utilization,
        "recommended_kvcache_gib": planned.recommended_kvcache_gib,
        "default_fits": default.leaves_margin,
        "attempts": list(attempts) if attempts is not None else None,
        "proof": attempts[-1] if attempts else None,
    }
    where = describe_node(memory)
    proof_words, status = _proof(attempts or [])
    if not planned.fits:
        return CheckResult(
            name="memory",
            status=FAIL,
            details=details,
            summary=f"--gpu-memory-utilization {planned.utilization} asks for "
            f"{gib(planned.requested_bytes)} on {where}: vLLM refuses to start{proof_words}",
            fix=f"use {advice}; the flag reserves CPU RAM despite its name",
        )
    if not planned.leaves_margin:
        spare = memory.available_bytes - planned.requested_bytes
        return CheckResult(
            name="memory",
            status=FAIL,
            details=details,
            summary=f"--gpu-memory-utilization {planned.utilization} reserves "
            f"{gib(planned.requested_bytes)} of {where}, leaving {gib(spare)}: less than the "
            f"{gib(planned.margin_bytes)} that vLLM's own processes take before it checks, so it "
            f"refuses at start-up{proof_words}",
            fix=f"use {advice}, which leaves {gib(planned.margin_bytes)}",
        )
    worked = _worked(attempts or [])
    fixes = {
        PASS: "",
        SKIP: "",
        WARN: "see the generate check",
        FAIL: f"use --gpu-memory-utilization {worked} (proven by an engine start)"
        if worked
        else f"free memory, or lower --gpu-memory-utilization below {planned.utilization}",
    }
    return CheckResult(
        name="memory",
        status=status,
        details=details,
        summary=f"--gpu-memory-utilization {planned.utilization} reserves "
        f"{gib(planned.requested_bytes)} of {where}{proof_words}",
        fix=fixes[status],
    )


def _worked(attempts: Sequence[Mapping[str, Any]]) -> float | None:
    return next((a.get("utilization") for a in attempts if a.get("started")), None)


def _refusal(attempt: Mapping[str, Any]) -> str:
    setting = f"--gpu-memory-utilization {attempt.get('utilization')}"
    seen = attempt.get("memory_seen")
    return f"vLLM refused {setting}" + (f" ({seen})" if seen else "")


def _proof(attempts: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(words, status) for what generate's engine starts proved about the setting."""
    if not attempts:
        return "", SKIP
    first, last = attempts[0], attempts[-1]
    started = f"the engine started with --gpu-memory-utilization {last.get('utilization')}"
    if len(attempts) > 1 and last.get("started"):
        return f"; {_refusal(first)} at engine start; {started}", FAIL
    if last.get("started"):
        return f"; {started}", PASS
    if len(attempts) > 1 and last.get("memory_refused"):
        return f"; {_refusal(first)}, and the retry: {_refusal(last)}", FAIL
    if last.get("memory_refused"):
        return f"; {_refusal(last)}: memory was taken meanwhile", FAIL
    return "; not proven: the engine failed before it reserved memory", WARN


CHECK = Check(name="memory", order=80, run=run_memory, needs=("generate",), engine=True)
