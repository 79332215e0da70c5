"""Run two of vLLM's CPU kernels, compare them with torch in float64, print a `RESULT ` JSON line.

Run with the Python of the environment under test:
    python kernel_numbers.py KERNEL_LIBRARY
Each figure is max|kernel - reference| / max|reference|; the inputs come from a fixed seed, so two
wheels (or two CPUs) can be compared by the sha256 of their float32 outputs as well.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any

SHAPE = (8, 1024)  # tokens x hidden: small, this may run under qemu
EPS = 1e-6


def main() -> int:
    import torch

    torch.ops.load_library(sys.argv[1])
    ops = _namespace(torch, sys.argv[1])
    torch.manual_seed(0)
    x = torch.randn(*SHAPE, dtype=torch.float64)
    gate_up = torch.randn(SHAPE[0], 2 * SHAPE[1], dtype=torch.float64)
    weight = torch.rand(SHAPE[1], dtype=torch.float64) + 0.5
    rms_ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight
    gate, up = gate_up.chunk(2, dim=-1)
    silu_ref = torch.nn.functional.silu(gate) * up
    report: dict[str, object] = {"torch": torch.__version__, "shape": list(SHAPE)}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        started = time.monotonic()
        out = torch.empty(SHAPE, dtype=dtype)
        ops.rms_norm(out, x.to(dtype), weight.to(dtype), EPS)
        report[f"rms_norm_{name}"] = _relative(out, rms_ref)
        if dtype == torch.float32:
            report["rms_norm_fp32_sha256"] = hashlib.sha256(out.numpy().tobytes()).hexdigest()
        out = torch.empty(SHAPE, dtype=dtype)
        ops.silu_and_mul(out, gate_up.to(dtype))
        report[f"silu_and_mul_{name}"] = _relative(out, silu_ref)
        report[f"{name}_seconds"] = round(time.monotonic() - started, 2)
    print("RESULT " + json.dumps(report), flush=True)
    return 0


def _namespace(torch: Any, library: str) -> Any:
    """The op namespace of the library: its own name (a tier), or vLLM's `_C`."""
    tier = library.rsplit("/", 1)[-1].split(".", 1)[0]
    for name in dict.fromkeys((tier, "_C")):
        namespace = getattr(torch.ops, name)
        try:
            namespace.rms_norm  # noqa: B018 - looked up to see that it exists
        except (AttributeError, RuntimeError):
            continue
        return namespace
    raise SystemExit(f"no rms_norm in torch.ops.{tier} or torch.ops._C after loading {library}")


def _relative(out: object, reference: object) -> float:
    import torch

    assert isinstance(out, torch.Tensor) and isinstance(reference, torch.Tensor)
    error = (out.to(torch.float64) - reference).abs().max()
    return float(error / reference.abs().max())


if __name__ == "__main__":
    sys.exit(main())
