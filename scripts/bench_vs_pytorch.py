#!/usr/bin/env python3
"""The CPU transformer of this project beside PyTorch + transformers, on one machine.

Runs, each in its own process so that peak memory means something, with the same
thread count on both sides:
  - the 2048^3 f32 GEMM;
  - a training step (forward + backward + AdamW) of Qwen2ForCausalLM, fp32, eager
    attention, on the "tiny" (batch 8 x 512) and "small" (batch 4 x 256) configs, and
    of LlamaForCausalLM on SmolLM2-135M's shape ("smollm2", batch 1 x 1024);
  - greedy decoding of 8 sequences: 256-token prompt, 128 new tokens (the tiny config,
    and SmolLM2's shape with `--only smollm2`), against transformers' `generate()`;
then prints the table of ratios recorded in BENCHMARKS.md.

Needs torch and transformers (`pip install torch transformers`) and cargo. Debian's
`python3-torch` needs OpenBLAS's OpenMP build (`apt-get install libopenblas0-openmp`):
with its pthread build, torch's OpenMP threads and OpenBLAS's fight over the cores (its
2048^3 GEMM fell to 2 GFLOP/s on the 2-core VM). On a CPU that OpenBLAS does not know
(Zen 5) set `OPENBLAS_CORETYPE=SkylakeX` for its AVX-512 kernels. With
`--sage-binary PATH` it runs that build of `transformer_bench` instead of building one
(to compare two builds against the same PyTorch).

    python3 scripts/bench_vs_pytorch.py [--threads 2] [--steps 3] [--only tiny|small|smollm2]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {
    "tiny": dict(vocab_size=4096, hidden_size=256, intermediate_size=768,
                 num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                 batch=8, seq=512),
    "small": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                  num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  batch=4, seq=256),
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    batch=1, seq=1024, llama=True, rope_theta=100000.0),
}


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def model_of(name):
    """Qwen2ForCausalLM of a config, or LlamaForCausalLM (no q/k/v bias) for SmolLM2's."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    c = CONFIGS[name]
    config_class, model_class = ((LlamaConfig, LlamaForCausalLM) if c.get("llama")
                                 else (Qwen2Config, Qwen2ForCausalLM))
    config = config_class(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], rope_theta=c.get("rope_theta", 10000.0),
        rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True,
        attn_implementation="eager", use_cache=True)
    return model_class(config).float()


def torch_measure(what, name, steps):
    """Runs one PyTorch measurement in this process and returns its JSON record."""
    import torch
    torch.manual_seed(0)
    if what == "gemm":
        n = 2048
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b.T
        times = []
        for _ in range(5):
            start = time.perf_counter()
            a @ b.T
            times.append(time.perf_counter() - start)
        times.sort()
        return {"gflops": 2 * n ** 3 / times[2] / 1e9}
    c = CONFIGS[name]
    model = model_of(name)
    if what == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
        ids = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]))

        def step():
            opt.zero_grad(set_to_none=False)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()

        step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        tokens = c["batch"] * c["seq"] * steps
        return {"tokens_per_s": tokens / (time.perf_counter() - start),
                "peak_rss_mib": peak_rss_mib()}
    if what == "decode":
        model.eval()
        ids = torch.randint(0, c["vocab_size"], (8, 256))
        with torch.no_grad():
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=128, min_new_tokens=128, do_sample=False,
                                 pad_token_id=0)
            elapsed = time.perf_counter() - start
        new = (out.shape[1] - 256) * 8
        return {"tokens_per_s": new / elapsed, "peak_rss_mib": peak_rss_mib()}
    raise ValueError(what)


def run_torch(what, name, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    code = ("import sys, json, torch; sys.path.insert(0, %r); torch.set_num_threads(%d); "
            "import bench_vs_pytorch as b; print(json.dumps(b.torch_measure(%r, %r, %d)))"
            % (os.path.dirname(os.path.abspath(__file__)), threads, what, name, steps))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_rust(what, name, threads, steps, binary):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    args = [binary, what] + ([] if what == "gemm" else [name, "--steps", str(steps)])
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", choices=sorted(CONFIGS), help="one config only")
    parser.add_argument("--sage-binary", help="a built transformer_bench to run instead")
    args = parser.parse_args()
    binary = args.sage_binary
    if binary is None:
        subprocess.run(["cargo", "build", "--release", "-p", "sage-examples",
                        "--example", "transformer_bench"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "examples", "transformer_bench")

    names = [args.only] if args.only else ["tiny", "small"]
    rows = [("gemm", "2048^3", "gflops", 0.8)]
    rows += [("train", n, "tokens_per_s", 1.5 if n == "tiny" else 1.0) for n in names]
    decoded = "smollm2" if args.only == "smollm2" else "tiny"
    rows += [("decode", decoded, "tokens_per_s", 1.0 if decoded == "smollm2" else 10.0)]
    print(f"threads: {args.threads}, timed training steps: {args.steps}\n")
    print("| measurement | sage (CPU) | PyTorch | ratio | target | status | peak MiB sage / torch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for what, name, key, target in rows:
        ours = run_rust(what, name, args.threads, args.steps, binary)
        theirs = run_torch(what, name, args.threads, args.steps)
        ratio = ours[key] / theirs[key]
        unit = "GFLOP/s" if key == "gflops" else "tok/s"
        memory = ""
        if "peak_rss_mib" in ours:
            memory = f"{ours['peak_rss_mib']:.0f} / {theirs['peak_rss_mib']:.0f}"
        status = "met" if ratio >= target else "not met"
        print(f"| {what} {name} | {ours[key]:.1f} {unit} | {theirs[key]:.1f} {unit} | "
              f"{ratio:.2f}x | >= {target}x | {status} | {memory} |", flush=True)


if __name__ == "__main__":
    main()
