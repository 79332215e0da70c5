"""The `isa` check: the host has what the wheel needs; the tier vLLM picks loads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.detect.host import Host
from toolchain.targets import picked_tier
from toolchain.verify.checks import Check
from toolchain.verify.kernels import KernelLoad, describe, load_kernels
from toolchain.verify.results import FAIL, PASS, WARN, CheckResult

if TYPE_CHECKING:
    from toolchain.verify.context import Context

REBUILD = (
    "build on this machine (nox -s build-wheel picks the best target this CPU runs), or install "
    "the variant for it (python -m toolchain install-command)"
)


def run_isa(ctx: Context) -> CheckResult:
    state = ctx.state
    min_isa, target = wheel_needs(ctx.manifest)
    if state.needs is not None:
        min_isa, target = list(state.needs.features), state.needs.source
    loads = run_kernel_loads(state.python, ctx.facts, state.host, ctx.clean, min_isa, state.root)
    return check_isa(state.host, loads, min_isa, target)


def wheel_needs(manifest: Mapping[str, Any] | None) -> tuple[list[str], str]:
    """min_isa and target from the build manifest (in the wheel or its installed dist-info)."""
    if manifest is None:
        return [], "no build manifest: needs read from its kernel libraries"
    return list(manifest.get("min_isa", [])), f"target {manifest.get('target_isa')}"


def check_isa(
    host: Host, loads: Sequence[KernelLoad], min_isa: Sequence[str], target: str
) -> CheckResult:
    """The host has what the wheel needs; the tier vLLM picks here loads without SIGILL."""
    lacking = [feature for feature in min_isa if not host.isa.get(feature)]
    details: dict[str, Any] = {
        "min_isa": list(min_isa),
        "loads": {load.library: load.status for load in loads},
    }
    if lacking:
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary=f"this CPU lacks {', '.join(lacking)}, which the wheel ({target}) needs",
            fix=REBUILD,
        )
    if not loads:
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary="the installed vllm ships no kernel library (_C*.so): not a CPU build",
            fix="install a vLLM wheel built with VLLM_TARGET_DEVICE=cpu",
        )
    by_tier = {load.tier: load for load in loads}
    tier = picked_tier(host.arch, host.isa, by_tier)
    details["picked"] = tier
    picked = by_tier.get(tier or "")
    others = "; ".join(describe(load) for load in loads if load is not picked)
    if picked is None or picked.status != "ok":
        why = _picked_failure(picked)
        return CheckResult(
            name="isa",
            status=FAIL,
            details=details,
            summary=f"vLLM loads {tier} on this CPU and it cannot: {why}",
            fix=REBUILD,
        )
    broken = [load for load in loads if load.status == "error"]
    summary = f"vLLM picks {picked.library} here and it loads" + (f"; {others}" if others else "")
    if broken:
        return CheckResult(
            name="isa",
            status=WARN,
            summary=summary,
            details=details,
            fix="a kernel tier for other CPUs is broken: rebuild before publishing this wheel",
        )
    return CheckResult(name="isa", status=PASS, summary=summary, details=details)


def _picked_failure(picked: KernelLoad | None) -> str:
    if picked is None:
        return "vLLM has no tier for this CPU"
    if picked.status == "sigill":
        return f"{picked.library}: killed by SIGILL: this CPU lacks {', '.join(picked.lacking)}"
    return describe(picked)


def run_kernel_loads(
    python: Path,
    facts: Mapping[str, Any],
    host: Host,
    cwd: Path,
    min_isa: Sequence[str],
    root: Path = Path("/"),
) -> list[KernelLoad]:
    """Each kernel library loaded by `python`; `root`: where its paths are, seen from here."""
    package = Path(facts["vllm_package"])
    return load_kernels(
        python,
        package,
        arch=host.arch,
        isa=host.isa,
        wheel_min_isa=tuple(min_isa),
        cwd=cwd,
        root=root,
    )


CHECK = Check(name="isa", order=30, run=run_isa)
