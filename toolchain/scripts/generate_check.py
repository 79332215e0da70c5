"""Generate text offline with vLLM and report tokens per second, as JSON on a `RESULT ` line.

Run with the Python of the environment under test, from a folder without a `vllm/` in it:
    python generate_check.py MODEL_DIR [--prompts N] [--max-tokens N]
The engine is created under `if __name__ == "__main__":` because vLLM's CPU workers use spawn.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=256)
    args = parser.parse_args()

    import vllm
    from vllm import LLM, SamplingParams

    started = time.monotonic()
    llm = LLM(model=args.model, max_model_len=args.max_model_len, dtype="float32", seed=0)
    load_seconds = time.monotonic() - started
    prompts = [f"hello world number {index}" for index in range(args.prompts)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    started = time.monotonic()
    outputs = llm.generate(prompts, params)
    seconds = time.monotonic() - started
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    report = {
        "vllm_version": vllm.__version__,
        "prompts": len(prompts),
        "generated_tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds else None,
        "load_seconds": round(load_seconds, 1),
        "first_text": outputs[0].outputs[0].text,
    }
    # vLLM logs its shutdown on stdout after this line, so the line is marked, not last.
    print("RESULT " + json.dumps(report), flush=True)
    return 0 if tokens == len(prompts) * args.max_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
