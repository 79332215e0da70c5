"""The `install` check: the wheel, torch and their companions installed as the manifest says."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.verify.checks import Check
from toolchain.verify.environment import check_install
from toolchain.verify.results import CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_install(ctx: Context) -> CheckResult:
    return check_install(
        ctx.facts,
        manifest=ctx.manifest,
        deps=ctx.state.deps,
        substitute_torch=ctx.substitute_torch,
    )


CHECK = Check(name="install", order=10, run=run_install)
