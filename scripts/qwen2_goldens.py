"""Golden outputs of tiny random Qwen2 models, computed by PyTorch + transformers.

The Rust test `tests/qwen2_goldens.rs` loads these models through
`sage_trainer::weights` into a `sage_core::transformer::Transformer` on the CPU
backend and checks its logits, loss, gradients and AdamW steps against the files
written here: a reference nobody in this project wrote.

Regenerate (no download; needs torch and transformers, e.g. the venv /tmp/torchenv):

    /tmp/torchenv/bin/python scripts/qwen2_goldens.py

Such a venv on Debian 12, CPU only, without PyTorch's CUDA wheels:

    apt-get install -y --no-install-recommends python3-torch python3-venv
    /usr/bin/python3 -m venv --system-site-packages /tmp/torchenv
    /tmp/torchenv/bin/pip install transformers==4.44.2 safetensors

It rewrites `tests/goldens/qwen2_tiny/{untied,tied}/` (about 0.4 MB together):

- `config.json` and the weights, written by transformers' own `save_pretrained`:
  `untied` (separate `lm_head`) as f32 split into shards with
  `model.safetensors.index.json`; `tied` (tied embeddings) as one bf16
  `model.safetensors`, and its goldens are computed from the bf16-rounded weights.
- `goldens.safetensors`: `logits.{s}` [len_s, vocab] for every position of each
  input sequence s, and `grad.{name}` for every parameter (HF names) of the loss.
- `goldens.json`: the input sequences, the loss (mean next-token NLL over every
  predicted position of both sequences, each sequence run on its own), the AdamW
  hyper-parameters, and `adamw_losses`: the loss before each of 5 AdamW steps and
  after the last (6 values), with torch.optim.AdamW over all parameters in one group.

Check that transformers loads a model this project saved (run by hand):

    QWEN2_GOLDENS_SAVE_TO=/tmp/sage-saved \
        cargo test -p sage-e2e --release --test qwen2_goldens
    /tmp/torchenv/bin/python scripts/qwen2_goldens.py --check-load /tmp/sage-saved/untied-f32

The test saves `{untied,tied}-{f32,bf16,f32-sharded}` there. `--check-load DIR` loads
DIR with `Qwen2ForCausalLM.from_pretrained` (failing on any missing, unexpected or
mismatched key) and compares its logits on the golden inputs with the goldens of
the variant DIR's name starts with.
"""

import argparse
import copy
import json
import math
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "tests" / "goldens" / "qwen2_tiny"

SEED = 1234
SEQUENCE_LENGTHS = (12, 7)
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
ADAMW_STEPS = 5


def tiny_config(tied: bool) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        attn_implementation="eager",
    )


def randomize(model, generator: torch.Generator) -> None:
    """Parameters with O(1) activations and non-trivial norms and biases (the
    default init gives near-uniform logits, which would test little)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(0.2 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[1]))


def sequences(vocab: int, generator: torch.Generator) -> list[list[int]]:
    return [
        torch.randint(0, vocab, (n,), generator=generator).tolist()
        for n in SEQUENCE_LENGTHS
    ]


def loss_and_logits(model, seqs):
    """Mean next-token NLL over all predicted positions of all sequences, each run
    on its own (the Rust model packs them; attention never crosses sequences)."""
    total, count, logits = 0.0, 0, []
    for seq in seqs:
        ids = torch.tensor([seq])
        out = model(input_ids=ids).logits[0]
        logits.append(out)
        logp = torch.log_softmax(out[:-1], dim=-1)
        targets = ids[0, 1:]
        total = total - logp.gather(1, targets[:, None]).sum()
        count += len(seq) - 1
    return total / count, logits


def build(variant: str, config, model_class, goldens: Path, generated_by: str) -> None:
    """Writes `goldens/VARIANT/`: the model (`tied`: bf16, one file; `untied`: f32
    shards) and what PyTorch computes with it."""
    tied = variant == "tied"
    generator = torch.Generator().manual_seed(SEED + tied)
    torch.manual_seed(SEED)
    model = model_class(config).float()
    randomize(model, generator)
    if tied:
        # Stored in bf16: the goldens come from the bf16-rounded weights. Only the
        # parameters are rounded; `model.to(bfloat16)` would also round the rotary
        # inverse frequencies, a buffer the Rust side recomputes in f32.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    seqs = sequences(config.vocab_size, generator)

    out_dir = goldens / variant
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*"):
        stale.unlink()
    if tied:
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir)
    else:
        model.save_pretrained(out_dir, max_shard_size="40KB")

    loss, logits = loss_and_logits(model, seqs)
    model.zero_grad()
    loss.backward()
    tensors = {f"logits.{s}": l.detach().contiguous() for s, l in enumerate(logits)}
    for name, p in model.named_parameters():
        tensors[f"grad.{name}"] = p.grad.detach().contiguous()
    save_file(tensors, out_dir / "goldens.safetensors")

    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    adamw_losses = []
    for _ in range(ADAMW_STEPS):
        optimizer.zero_grad()
        step_loss, _ = loss_and_logits(model, seqs)
        adamw_losses.append(step_loss.item())
        step_loss.backward()
        optimizer.step()
    with torch.no_grad():
        adamw_losses.append(loss_and_logits(model, seqs)[0].item())

    summary = {
        "generated_by": generated_by,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sequences": seqs,
        "loss": loss.item(),
        "adamw": {**ADAMW, "betas": list(ADAMW["betas"]), "steps": ADAMW_STEPS},
        "adamw_losses": adamw_losses,
    }
    (out_dir / "goldens.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{variant}: loss {loss.item():.6f}, adamw losses {adamw_losses}")


def check_load(directory: Path, model_class, goldens: Path) -> int:
    """Loads a model saved by this project with `model_class` and compares its logits
    with the goldens of the variant named by the directory's prefix."""
    variant = "tied" if directory.name.startswith("tied") else "untied"
    golden_dir = goldens / variant
    summary = json.loads((golden_dir / "goldens.json").read_text())
    from safetensors.torch import load_file

    goldens = load_file(golden_dir / "goldens.safetensors")
    # transformers 5 calls the dtype argument `dtype`, earlier versions `torch_dtype`.
    dtype_argument = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model, info = model_class.from_pretrained(
        directory,
        attn_implementation="eager",
        output_loading_info=True,
        **{dtype_argument: torch.float32},
    )
    model.eval()
    problems = {key: list(found) for key, found in info.items() if found}
    if problems:
        print(f"{directory}: transformers loaded it with {problems}: FAILED")
        return 1
    worst = 0.0
    with torch.no_grad():
        for s, seq in enumerate(summary["sequences"]):
            logits = model(input_ids=torch.tensor([seq])).logits[0]
            worst = max(worst, (logits - goldens[f"logits.{s}"]).abs().max().item())
    saved_dtype = json.loads((directory / "config.json").read_text()).get("torch_dtype")
    tolerance = 1e-4 if saved_dtype == "float32" or variant == "tied" else 0.1
    verdict = "ok" if worst <= tolerance else "FAILED"
    print(
        f"{directory}: transformers loaded it ({saved_dtype}); max |logit - golden| "
        f"= {worst:.3g} (tolerance {tolerance}): {verdict}"
    )
    return 0 if worst <= tolerance else 1


def main(tiny_config, model_class, goldens: Path, generated_by: str) -> int:
    """Writes both variants' goldens, or with `--check-load DIR` checks a saved model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check-load",
        type=Path,
        metavar="DIR",
        help="load a model saved by this project with transformers and compare logits",
    )
    args = parser.parse_args()
    if args.check_load is not None:
        return check_load(args.check_load, model_class, goldens)
    torch.set_num_threads(1)
    for variant in ("untied", "tied"):
        build(variant, tiny_config(variant == "tied"), model_class, goldens, generated_by)
    return 0


if __name__ == "__main__":
    sys.exit(main(tiny_config, Qwen2ForCausalLM, GOLDENS, "scripts/qwen2_goldens.py"))
