"""Golden outputs of tiny random Llama models, computed by PyTorch + transformers.

The Llama counterpart of `scripts/qwen2_goldens.py` (same inputs, same files, same
`--check-load`; read its docs): `LlamaForCausalLM` models with no bias anywhere, a
rotary base of 500,000 (Llama 3's) and RMSNorm epsilon 1e-5, untied (f32 shards, as
TinyLlama) and tied (bf16, as SmolLM). `tests/llama_goldens.rs` checks the project's
CPU transformer against them.

Regenerate (no download; needs torch and transformers: the venv that
`scripts/qwen2_goldens.py` describes):

    /tmp/torchenv/bin/python scripts/llama_goldens.py

It rewrites `tests/goldens/llama_tiny/{untied,tied}/`. Check that transformers loads
a Llama model this project saved, without missing or unexpected keys:

    LLAMA_GOLDENS_SAVE_TO=/tmp/sage-saved-llama \
        cargo test -p sage-e2e --release --test llama_goldens
    /tmp/torchenv/bin/python scripts/llama_goldens.py --check-load /tmp/sage-saved-llama/untied-f32
"""

import sys
from pathlib import Path

from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen2_goldens  # noqa: E402  (the shared generator)

GOLDENS = qwen2_goldens.ROOT / "tests" / "goldens" / "llama_tiny"


def tiny_config(tied: bool) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=tied,
        attn_implementation="eager",
    )


if __name__ == "__main__":
    sys.exit(
        qwen2_goldens.main(tiny_config, LlamaForCausalLM, GOLDENS, "scripts/llama_goldens.py")
    )
