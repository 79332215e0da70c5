"""The `serve` check: `vllm serve` answers the OpenAI API on a loopback port."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.verify.checks import Check
from toolchain.verify.engine_checks import run_serve
from toolchain.verify.results import FAIL, CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context

EMULATED = (
    "not run under emulation: a second engine plus the server's start-up under qemu does not "
    "fit verify's 30-minute budget on the emulating machine; verify on an Arm machine for it"
)


def failed_generate(ctx: Context) -> str:
    generated = ctx.results.get("generate")
    failed = generated is not None and generated.status == FAIL
    return "not started: the engine failed in generate" if failed else ""


def serve(ctx: Context) -> CheckResult:
    return run_serve(ctx.engines.engine)


CHECK = Check(
    name="serve",
    order=100,
    run=serve,
    needs=("generate",),
    engine=True,
    emulated=EMULATED,
    skip=failed_generate,
)
