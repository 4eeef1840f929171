#!/usr/bin/env python3
"""The CUDA backend beside PyTorch + transformers on one GPU (issue 20's targets).

First run on an H100 on 2026-11-24 (../shared/gpu/2026-11-24-h100.md): 0.28x PyTorch's
training speed, 1.41x its decoding. The bf16 mode has since gained tensor-core training
attention, kept bf16 copies of the weights, split-KV decoding attention and token
choice on the device, none of them yet timed on a GPU.

On a GPU machine it:
  1. installs what it needs from PyPI (torch, transformers, and CUDA 13.0's NVRTC and
     cuBLAS wheels for the Rust backend, on LD_LIBRARY_PATH) unless --no-install;
  2. builds the CUDA parity tests, the NVRTC compile test and the benchmark example
     (`cargo ... --features cuda`), or, where the machine has no Rust toolchain, uses
     the binaries that `--build-only` left in target/cuda-bench/ on a build machine;
  3. runs the NVRTC test and the parity tests with SAGE_REQUIRE_NVRTC=1 and
     SAGE_REQUIRE_CUDA=1 (a missing device fails instead of skipping) and stops if
     they fail;
  4. measures, each in its own process, on a Qwen2.5-0.5B-shaped model with random
     weights: training tokens/s and MFU (forward + backward + AdamW, the bf16 mode with
     f32 master weights on our side; Qwen2ForCausalLM with SDPA attention under bf16
     autocast with f32 weights and fused AdamW on PyTorch's side), and batched greedy
     decoding tokens/s (64 sequences, 512-token prompts, 256 new tokens) against
     transformers' generate() in bf16, and our time per decoding step (the same run
     with one new token subtracted);
  5. prints the table for BENCHMARKS.md, with issue 37's targets (training >= 1.5x
     PyTorch and >= 28% MFU; decoding >= 15x generate() and <= 3 ms per step; peak
     device memory <= 1.2x PyTorch's in training and <= generate()'s in decoding: our
     memory pool's high-water mark against torch.cuda.max_memory_allocated);
  6. runs our decoding again with `--step-graphs off` (every decoding step launched
     kernel by kernel instead of replayed from a CUDA graph) and with `--weights
     trainable` (f32 weights with kept bf16 copies instead of frozen bf16 ones), our
     training with `--dkv-tile 32` (the dk/dv attention kernel over tiles of 32
     queries), and both with `--bf16-inputs casts` (every bf16 GEMM input made by a cast
     kernel, none by the kernel that wrote the tensor), and our decoding with
     `--rope-append separate` (a decoding step's biases, rotations and cache append as
     the separate kernels instead of one) and with `--batched-gemms off` (a layer's k/v
     and gate/up projections as two GEMMs each instead of one batched GEMM), and prints
     each beside the default. (`--bf16-inputs converted`, cuBLAS rounding the f32 operands itself, was
     measured this way on 2026-11-28: 0.81x the training speed; and the query gradient
     added by the dk/dv kernel with atomics instead of its own kernel: 0.68x, since
     removed; BENCHMARKS.md.)

    python3 scripts/bench_cuda.py [--steps 5] [--batch 8] [--seq 1024] [--no-install] [--skip-checks]
    python3 scripts/bench_cuda.py --build-only   # on a build machine, no GPU needed
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(ROOT, "target", "cuda-bench")
PINNED = ["nvidia-cuda-nvrtc==13.0.88", "nvidia-cublas==13.0.2.14"]
WHEELS_DIR = os.path.join(ROOT, "target", "cuda-wheels")

# Qwen2.5-0.5B's shape (the Rust side's `qwen0.5b` config in transformer_bench).
QWEN05 = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
              num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
              rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768,
              tie_word_embeddings=True)

# Dense bf16 tensor-core peaks in FLOP/s, by a substring of the device name.
PEAKS = [("H100 PCIe", 756e12), ("H100", 989.4e12), ("H200", 989.4e12),
         ("A100", 312e12), ("L40S", 362e12), ("RTX 4090", 165e12)]


def log(message):
    print(message, file=sys.stderr, flush=True)


def run(args, env=None, capture=False):
    log("+ " + " ".join(args))
    result = subprocess.run(args, cwd=ROOT, env=env, check=True, text=True,
                            capture_output=capture)
    return result.stdout if capture else None


# ---- setup ------------------------------------------------------------------------

def install():
    """torch and transformers into this Python; the CUDA 13.0 wheels into WHEELS_DIR."""
    def pip(*args):
        base = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        try:
            run(base + list(args))
        except subprocess.CalledProcessError:
            # A system Python refuses installs unless told (PEP 668).
            run(base + ["--break-system-packages"] + list(args))

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        pip("torch", "transformers")
    if not glob.glob(os.path.join(WHEELS_DIR, "nvidia", "cu13", "lib", "libnvrtc.so.13")):
        pip("--no-deps", "--target", WHEELS_DIR, *PINNED)


def cuda_env():
    """The environment for the Rust binaries: the CUDA 13.0 wheels' libraries first."""
    env = dict(os.environ)
    libs = sorted({os.path.dirname(p) for p in
                   glob.glob(os.path.join(WHEELS_DIR, "nvidia", "**", "lib*.so*"),
                             recursive=True)})
    env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")]).strip(":")
    env["SAGE_REQUIRE_CUDA"] = "1"
    env["SAGE_REQUIRE_NVRTC"] = "1"
    return env


def executable(cargo_args, name):
    """Runs a cargo build and returns the path of the executable target `name`."""
    out = run(["cargo", *cargo_args, "--release", "--message-format=json"], capture=True)
    for line in out.splitlines():
        record = json.loads(line)
        if record.get("reason") == "compiler-artifact" and record.get("executable") \
                and record["target"]["name"] == name:
            return record["executable"]
    raise RuntimeError(f"cargo built no executable named {name}")


def build():
    """Builds the two test binaries and the benchmark, and copies them to BENCH_DIR."""
    os.makedirs(BENCH_DIR, exist_ok=True)
    targets = [
        (["test", "-p", "sage-e2e", "--test", "parity_cuda", "--no-run"], "parity_cuda"),
        (["test", "-p", "sage-backend-cuda", "--test", "nvrtc", "--no-run"], "nvrtc"),
        (["build", "-p", "sage-examples", "--features", "cuda", "--example",
          "transformer_bench"], "transformer_bench"),
    ]
    for cargo_args, name in targets:
        shutil.copy(executable(cargo_args, name), os.path.join(BENCH_DIR, name))


def binary(name):
    path = os.path.join(BENCH_DIR, name)
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing: run with cargo available, or "
                           "`--build-only` on a build machine and bring target/cuda-bench")
    return path


# ---- PyTorch side (each measurement in its own process) ------------------------------

def qwen2():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(**QWEN05, attn_implementation="sdpa", use_cache=True)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def torch_train(batch, seq, steps):
    """Training tokens/s: bf16 autocast, f32 weights, fused AdamW."""
    import torch
    model = qwen2().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    ids = torch.randint(0, QWEN05["vocab_size"], (batch, seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return {"tokens_per_s": batch * seq * steps / (time.perf_counter() - start),
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2 ** 20}


def torch_decode(seqs, prompt, new):
    """Greedy generate() tokens/s in bf16 (prefill included, as on our side)."""
    import torch
    model = qwen2().to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(0, QWEN05["vocab_size"], (seqs, prompt), device="cuda")
    with torch.no_grad():
        model.generate(input_ids=ids[:, :16], attention_mask=torch.ones_like(ids[:, :16]),
                       max_new_tokens=4, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=0)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    return {"tokens_per_s": (out.shape[1] - prompt) * seqs / elapsed,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2 ** 20}


def torch_device():
    import torch
    return torch.cuda.get_device_name(0)


def run_torch(function, *args):
    code = ("import sys, json; sys.path.insert(0, %r); import bench_cuda as b; "
            "print(json.dumps(b.%s(*%r)))"
            % (os.path.dirname(os.path.abspath(__file__)), function, list(args)))
    out = run([sys.executable, "-c", code], capture=True)
    return json.loads(out.strip().splitlines()[-1])


# ---- our side ------------------------------------------------------------------------

def run_rust(env, *args):
    out = subprocess.run([binary("transformer_bench"), *args, "--backend", "cuda",
                          "--precision", "bf16"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    log(out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- MFU -----------------------------------------------------------------------------

def training_flops_per_token(seq):
    """6 x the parameters every token multiplies (the layers and the output head, tied
    or not), plus causal attention's 6 * L * seq * H * hd (half of 12 for the mask)."""
    c = QWEN05
    d, i, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * i
    matmul_params = layers * per_layer + c["vocab_size"] * d
    return 6 * matmul_params + 6 * layers * seq * d


def peak_flops(name, override):
    if override:
        return override * 1e12
    for key, peak in PEAKS:
        if key in name:
            return peak
    raise RuntimeError(f"no bf16 peak known for {name!r}: pass --peak-tflops")


# ---- main ----------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed training steps")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--seqs", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak")
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--skip-checks", action="store_true",
                        help="skip the NVRTC and parity tests (a caller ran them already)")
    args = parser.parse_args()

    if args.build_only:
        build()
        log(f"built into {BENCH_DIR}")
        return
    if not args.no_install:
        install()
    if shutil.which("cargo"):
        build()
    env = cuda_env()
    if not args.skip_checks:
        run([binary("nvrtc")], env=env)
        run([binary("parity_cuda"), "--test-threads=1"], env=env)

    device = run_torch("torch_device")
    peak = peak_flops(device, args.peak_tflops)
    flops = training_flops_per_token(args.seq)
    shape = [str(args.batch), str(args.seq), str(args.steps)]
    ours_train = run_rust(env, "train", "qwen0.5b", "--batch", shape[0], "--seq", shape[1],
                          "--steps", shape[2])
    theirs_train = run_torch("torch_train", args.batch, args.seq, args.steps)
    decode_args = ["decode", "qwen0.5b", "--seqs", str(args.seqs), "--prompt", str(args.prompt)]
    ours_decode = run_rust(env, *decode_args, "--new", str(args.new))
    ours_prefill = run_rust(env, *decode_args, "--new", "1")
    theirs_decode = run_torch("torch_decode", args.seqs, args.prompt, args.new)
    # The decoding run again with every step launched kernel by kernel, not replayed
    # from a CUDA graph, to say what the graphs are worth; the training run again with
    # the dk/dv attention kernel over tiles of 32 queries, to say which tile to keep.
    ours_decode_eager = run_rust(env, *decode_args, "--new", str(args.new),
                                 "--step-graphs", "off")
    ours_train_dkv32 = run_rust(env, "train", "qwen0.5b", "--batch", shape[0], "--seq",
                                shape[1], "--steps", shape[2], "--dkv-tile", "32")
    # The decoding run again with trainable weights (f32, with kept bf16 copies for the
    # GEMMs) instead of frozen bf16 ones, to say what freezing saves.
    ours_decode_trainable = run_rust(env, *decode_args, "--new", str(args.new),
                                     "--weights", "trainable")
    # Both again with every bf16 GEMM input made by a cast kernel, to say what the
    # kernels' own bf16 copies of their outputs save.
    ours_train_casts = run_rust(env, "train", "qwen0.5b", "--batch", shape[0], "--seq",
                                shape[1], "--steps", shape[2], "--bf16-inputs", "casts")
    ours_decode_casts = run_rust(env, *decode_args, "--new", str(args.new),
                                 "--bf16-inputs", "casts")
    # The decoding run again with each layer's biases, rotations and cache append as the
    # separate kernels, to say what running them as one saves.
    ours_decode_separate = run_rust(env, *decode_args, "--new", str(args.new),
                                    "--rope-append", "separate")
    # And with one GEMM per projection, to say what the batched GEMMs save.
    ours_decode_unbatched = run_rust(env, *decode_args, "--new", str(args.new),
                                     "--batched-gemms", "off")

    def mfu(record):
        return record["tokens_per_s"] * flops / peak

    train_ratio = ours_train["tokens_per_s"] / theirs_train["tokens_per_s"]
    decode_ratio = ours_decode["tokens_per_s"] / theirs_decode["tokens_per_s"]
    prefill = args.seqs / ours_prefill["tokens_per_s"]

    def step_ms(record):
        """Seconds of the whole run less those of the prefill and its one token, per step."""
        whole = args.seqs * args.new / record["tokens_per_s"]
        return 1e3 * (whole - prefill) / max(args.new - 1, 1)
    print(f"device: {device}; peak {peak / 1e12:.0f} TFLOP/s bf16; "
          f"{flops / 1e9:.2f} GFLOP per training token")
    print(f"training {args.batch} x {args.seq} tokens, {args.steps} timed steps; decoding "
          f"{args.seqs} sequences, {args.prompt}-token prompts, {args.new} new tokens\n")
    print("| measurement | sage (CUDA, bf16 mode) | PyTorch | ratio | target | status |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| training tok/s | {ours_train['tokens_per_s']:.0f} | "
          f"{theirs_train['tokens_per_s']:.0f} | {train_ratio:.2f}x | >= 1.5x | "
          f"{'met' if train_ratio >= 1.5 else 'not met'} |")
    print(f"| training MFU | {100 * mfu(ours_train):.1f}% | {100 * mfu(theirs_train):.1f}% | "
          f"| >= 28% | {'met' if mfu(ours_train) >= 0.28 else 'not met'} |")
    print(f"| decoding tok/s | {ours_decode['tokens_per_s']:.0f} | "
          f"{theirs_decode['tokens_per_s']:.0f} | {decode_ratio:.2f}x | >= 15x | "
          f"{'met' if decode_ratio >= 15.0 else 'not met'} |")
    print(f"| decoding step, {args.seqs} sequences | {step_ms(ours_decode):.2f} ms | | | <= 3 ms | "
          f"{'met' if step_ms(ours_decode) <= 3.0 else 'not met'} |")
    # Peak device memory: ours is the high-water mark of the memory pool our allocations
    # come from, PyTorch's torch.cuda.max_memory_allocated; neither counts cuBLAS's
    # workspace or the CUDA context.
    for name, ours, theirs, bound in [("training", ours_train, theirs_train, 1.2),
                                      ("decoding", ours_decode, theirs_decode, 1.0)]:
        ratio = ours["peak_gpu_mib"] / theirs["peak_gpu_mib"]
        print(f"| {name} peak device memory | {ours['peak_gpu_mib']:.0f} MiB | "
              f"{theirs['peak_gpu_mib']:.0f} MiB | {ratio:.2f}x | <= {bound}x | "
              f"{'met' if ratio <= bound else 'not met'} |")
    graphs = ours_decode.get("step_graphs", {})
    print(f"\nDecoding steps from CUDA graphs (captured {graphs.get('captured')}, replayed "
          f"{graphs.get('replayed')}, eager {graphs.get('eager')}) against every step "
          f"launched kernel by kernel (`--step-graphs off`):\n")
    print("| measurement | graphs (default) | kernel by kernel | graphs / kernel by kernel |")
    print("| --- | --- | --- | --- |")
    eager_tokens = ours_decode_eager["tokens_per_s"]
    print(f"| decoding tok/s | {ours_decode['tokens_per_s']:.0f} | {eager_tokens:.0f} | "
          f"{ours_decode['tokens_per_s'] / eager_tokens:.2f}x |")
    print(f"| decoding step | {step_ms(ours_decode):.2f} ms | {step_ms(ours_decode_eager):.2f} ms | "
          f"{step_ms(ours_decode) / step_ms(ours_decode_eager):.2f}x |")
    print(f"| decoding peak device memory | {ours_decode['peak_gpu_mib']:.0f} MiB | "
          f"{ours_decode_eager['peak_gpu_mib']:.0f} MiB | "
          f"{ours_decode['peak_gpu_mib'] / ours_decode_eager['peak_gpu_mib']:.2f}x |")
    # The host's share of a step from a graph: walking the step's calls to find its graph
    # (no kernel runs then), before the one launch; the rest of the step is the GPU's and
    # the wait for the chosen tokens.
    if graphs.get("traced"):
        tracing = graphs["tracing_ms"] / graphs["traced"]
        print(f"| host time tracing a step | {tracing:.2f} ms "
              f"({100 * tracing / step_ms(ours_decode):.0f}% of the step) | | |")

    print("\nA decoding step's fewer launches (the default) against the separate kernels "
          "(`--rope-append separate`: each layer's biases, rotations and cache append as "
          "three or four kernels, not one) and GEMMs (`--batched-gemms off`: the k/v and "
          "gate/up projections as two GEMMs each, not one batched GEMM):\n")
    print("| measurement | default | separate kernels | default / separate | one GEMM each "
          "| default / one each |")
    print("| --- | --- | --- | --- | --- | --- |")
    tokens = [r["tokens_per_s"] for r in (ours_decode, ours_decode_separate,
                                          ours_decode_unbatched)]
    print(f"| decoding tok/s | {tokens[0]:.0f} | {tokens[1]:.0f} | {tokens[0] / tokens[1]:.2f}x "
          f"| {tokens[2]:.0f} | {tokens[0] / tokens[2]:.2f}x |")
    steps = [step_ms(r) for r in (ours_decode, ours_decode_separate, ours_decode_unbatched)]
    print(f"| decoding step | {steps[0]:.2f} ms | {steps[1]:.2f} ms | {steps[0] / steps[1]:.2f}x "
          f"| {steps[2]:.2f} ms | {steps[0] / steps[2]:.2f}x |")

    print("\nDecoding with the weights frozen in bf16 (`Transformer::new_frozen`, as `sage "
          "eval` loads them; the default) against trainable f32 weights with kept bf16 "
          "copies (`--weights trainable`):\n")
    print("| measurement | frozen (default) | trainable | frozen / trainable |")
    print("| --- | --- | --- | --- |")
    trainable_tokens = ours_decode_trainable["tokens_per_s"]
    print(f"| decoding tok/s | {ours_decode['tokens_per_s']:.0f} | {trainable_tokens:.0f} | "
          f"{ours_decode['tokens_per_s'] / trainable_tokens:.2f}x |")
    print(f"| decoding peak device memory | {ours_decode['peak_gpu_mib']:.0f} MiB | "
          f"{ours_decode_trainable['peak_gpu_mib']:.0f} MiB | "
          f"{ours_decode['peak_gpu_mib'] / ours_decode_trainable['peak_gpu_mib']:.2f}x |")

    print("\nbf16 GEMM inputs written by the kernels that make them (the default) against "
          "all made by cast kernels (`--bf16-inputs casts`):\n")
    print("| measurement | kernels' copies (default) | casts | copies / casts |")
    print("| --- | --- | --- | --- |")
    for name, ours, casts in [("training", ours_train, ours_train_casts),
                              ("decoding", ours_decode, ours_decode_casts)]:
        print(f"| {name} tok/s | {ours['tokens_per_s']:.0f} | {casts['tokens_per_s']:.0f} | "
              f"{ours['tokens_per_s'] / casts['tokens_per_s']:.2f}x |")
        print(f"| {name} peak device memory | {ours['peak_gpu_mib']:.0f} MiB | "
              f"{casts['peak_gpu_mib']:.0f} MiB | "
              f"{ours['peak_gpu_mib'] / casts['peak_gpu_mib']:.2f}x |")
        # GEMM operands cast over the whole run (a decoding step run from a CUDA graph
        # counts its casts as it is traced, and again when its graph is captured).
        print(f"| {name}: operands cast | {ours.get('operand_casts')} | "
              f"{casts.get('operand_casts')} | |")

    print("\nThe dk/dv attention kernel over tiles of 32 queries (`--dkv-tile 32`) against "
          "16 (the default):\n")
    print("| measurement | 16 queries (default) | 32 queries | 32 / 16 |")
    print("| --- | --- | --- | --- |")
    print(f"| training tok/s | {ours_train['tokens_per_s']:.0f} | "
          f"{ours_train_dkv32['tokens_per_s']:.0f} | "
          f"{ours_train_dkv32['tokens_per_s'] / ours_train['tokens_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
