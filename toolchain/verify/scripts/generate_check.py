"""Generate text offline with vLLM and report tokens per second, as JSON on a `RESULT ` line.

A `STARTED ` line comes first, once the engine is up (its memory reserved).

Run with the Python of the environment under test, from a folder without a `vllm/` in it:
    python generate_check.py MODEL_DIR [--prompts N [N ...]] [--max-tokens N]
        [--gpu-memory-utilization F | --kv-cache-memory-bytes N] [--enforce-eager]
        [--dtype float32|bfloat16] [--warmup]
The engine is created under `if __name__ == "__main__":` because vLLM's CPU workers use spawn.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def child_processes() -> list[str]:
    """Command lines of this process's children (vLLM retitles its engine core)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid():
            found.append(cmdline[:80])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--prompts", type=int, nargs="+", default=[1])
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=0, help="instead of the above")
    parser.add_argument("--enforce-eager", action="store_true", help="no torch.compile")
    parser.add_argument("--dtype", default="float32", help="the model's dtype in the engine")
    parser.add_argument("--warmup", action="store_true", help="each count once untimed first")
    args = parser.parse_args()

    import vllm
    from vllm import LLM, SamplingParams

    started = time.monotonic()
    memory = (
        {"kv_cache_memory_bytes": args.kv_cache_memory_bytes}
        if args.kv_cache_memory_bytes
        else {"gpu_memory_utilization": args.gpu_memory_utilization}
    )
    llm = LLM(
        model=args.model,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        seed=0,
        enforce_eager=args.enforce_eager,
        **memory,
    )
    report = {
        "vllm_version": vllm.__version__,
        "load_seconds": round(time.monotonic() - started, 1),
        "start_method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"),
        "enforce_eager": args.enforce_eager,
        "dtype": args.dtype,
        "engine_processes": child_processes(),
    }
    # The engine is up (memory reserved, KV cache allocated) even if generating fails later.
    print("STARTED " + json.dumps(report), flush=True)
    for count in args.prompts if args.warmup else ():  # first runs compile and allocate
        generate(llm, SamplingParams, count, args.max_tokens)
    report["runs"] = [
        generate(llm, SamplingParams, count, args.max_tokens) for count in args.prompts
    ]
    # vLLM logs its shutdown on stdout after this line, so the line is marked, not last.
    print("RESULT " + json.dumps(report), flush=True)
    complete = all(r["generated_tokens"] == r["prompts"] * args.max_tokens for r in report["runs"])
    return 0 if complete else 1


def generate(llm: Any, sampling_params: Any, count: int, max_tokens: int) -> dict[str, Any]:
    prompts = [f"hello world number {index}" for index in range(count)]
    params = sampling_params(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    started = time.monotonic()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.monotonic() - started
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    return {
        "prompts": count,
        "generated_tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds else None,
        "first_text": outputs[0].outputs[0].text,
    }


if __name__ == "__main__":
    sys.exit(main())
