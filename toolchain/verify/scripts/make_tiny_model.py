"""Write a tiny Llama model that vLLM can load, with no hub access.

Run with the Python of an environment that has torch, transformers and tokenizers:
    python make_tiny_model.py OUT_DIR [--seed N]
Random weights (seeded), a byte-level BPE tokenizer trained here on a small built-in corpus, and a
chat template. It generates gibberish, quickly: enough to prove the engine loads and runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a small model runs on the cpu and answers in words",
    "hello world, this is a test of text generation",
    "vllm serves language models over an openai compatible api",
    "numbers like 1 2 3 4 5 6 7 8 9 10 and letters a b c d e f g",
] * 50
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]


def make_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(fast)


def make_model(out: Path, vocab_size: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    # head_dim 64: vLLM's CPU attention kernels support only some head sizes (16 is not one).
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    vocab_size = make_tokenizer(args.out)
    make_model(args.out, vocab_size, args.seed)
    print(json.dumps({"model": str(args.out), "vocab_size": vocab_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
