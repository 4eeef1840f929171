#!/usr/bin/env python3
"""A LoRA checkpoint against PEFT: the model the run started from with the checkpoint's
adapter applied by PEFT (`PeftModel.from_pretrained(base, CHECKPOINT/adapter)`) must give
the logits of the checkpoint's merged weights loaded by transformers.

    python3 scripts/peft_check.py BASE_DIR CHECKPOINT_DIR

Needs torch, transformers and peft (checked 2026-11-27 with Debian's CPU PyTorch 1.13,
transformers 4.44.2 and peft 0.12.0). Prints the largest logit difference against the
largest logit, and exits 1 when it exceeds 1e-4 of it.
"""

import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM


def main():
    base_dir, checkpoint = sys.argv[1], sys.argv[2]
    ids = torch.tensor([[5, 17, 300, 42, 99, 7, 250, 11]])
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
        before = base(ids).logits
        adapted = PeftModel.from_pretrained(base, f"{checkpoint}/adapter")(ids).logits
        merged = AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32)
        merged = merged(ids).logits
    scale = merged.abs().max().item()
    diff = (adapted - merged).abs().max().item()
    print(f"the base model against the merged one: max logit difference "
          f"{(before - merged).abs().max().item():.3g} (what the adapters changed)")
    print(f"PEFT's base + adapter against the merged model: max difference {diff:.3g} "
          f"of max |logit| {scale:.3g}")
    sys.exit(0 if diff <= 1e-4 * scale else 1)


if __name__ == "__main__":
    main()
