"""The `symbols` check: every symbol the kernel libraries import is defined, named before a load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.verify.checks import Check
from toolchain.verify.results import SKIP, CheckResult
from toolchain.verify.symbols import check_symbols, kernel_symbols

if TYPE_CHECKING:
    from toolchain.verify.context import Context


def run_symbols(ctx: Context) -> CheckResult:
    """Emulated, the symbols were read before the install's first load (state.symbols)."""
    return ctx.state.symbols or _native_symbols(ctx)


def _native_symbols(ctx: Context) -> CheckResult:
    site = Path(ctx.facts["vllm_package"]).parent
    interpreter = Path(os.path.realpath(ctx.facts.get("python") or ctx.state.python))
    missing = kernel_symbols(site, interpreter=interpreter, arch=ctx.state.host.arch)
    if missing is None:
        return CheckResult(
            name="symbols",
            status=SKIP,
            summary="readelf is not installed (apt-get install binutils)",
        )
    return check_symbols(missing)


CHECK = Check(name="symbols", order=20, run=run_symbols)
