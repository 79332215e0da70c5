"""The `numerics` check: kernels against float64 torch, on the tier the isa check proved loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.verify.checks import Check
from toolchain.verify.numerics import check_numerics
from toolchain.verify.results import CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_numerics(ctx: Context) -> CheckResult:
    state = ctx.state
    isa = ctx.results.get("isa")
    return check_numerics(state.python, ctx.facts, ctx.clean, isa, state.root)


CHECK = Check(name="numerics", order=40, run=run_numerics, needs=("isa",))
