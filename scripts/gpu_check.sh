#!/usr/bin/env bash
# Everything the CUDA work needs checked and timed on a GPU, in one call of about six
# minutes (issue 37). The GPU machine has no Rust toolchain: build here first, then carry
# target/cuda-bench (ignored by git; stripped, about 25 MB) to the GPU machine and run
# this script there.
#
#   bash scripts/gpu_prepare.sh                         # here: target/cuda-bench, packed with SmolLM2
#   bash scripts/gpu_check.sh [OUT_DIR]                 # on the GPU machine (default $OUT or target/gpu-check)
#
# (gpu_prepare.sh packs target/cuda-bench into target/smollm2-a with the GGUF's first
# half; call 1 carries that folder and runs `bash scripts/smollm2_parts.sh unpack` first.)
#
# It runs, each step's output in STEP.log (all packed into OUT_DIR/logs.tar.gz at the
# end) and a line per step on stdout:
#   1. nvidia-smi, the NVRTC test and the CUDA parity tests (a missing device fails); a
#      failure is printed first and the rest still runs, so one failed test does not cost
#      the call's measurements (a faster kernel that fails parity is still not done);
#   2. scripts/bench_cuda.py: the bf16 mode against PyTorch on the same GPU (training,
#      decoding, the time per decoding step, peak device memory against
#      torch.cuda.max_memory_allocated), with issue 37's targets, decoding with its
#      steps replayed from CUDA graphs (the default) against kernel by kernel (and the
#      host's time tracing a step, its share of the step's time), decoding
#      with frozen bf16 weights (the default, as `sage eval` loads a model) against
#      trainable f32 ones, training with the dk/dv attention kernel over tiles of 32
#      queries against 16, and training
#      and decoding with the bf16 GEMM inputs written by the kernels that make them (the
#      default) against all made by cast kernels, and decoding with each layer's
#      biases, rotations and cache append as one kernel and its k/v and gate/up
#      projections as one batched GEMM each (the defaults) against the separate kernels
#      (`--rope-append separate`) and GEMMs (`--batched-gemms off`); then a prefill
#      continued from KV
#      caches (64 sequences holding 512 tokens prefill 128 more, as an agent's next turn
#      does with held caches) against a whole prefill of the 640, in the bf16 mode
#      (`Kernels::attention_cached` runs there as decoding attention, position by
#      position: the figure says whether CUDA wants a kernel of its own), and a GRPO
#      step's first turn (64 prompts of 1,000 tokens in groups of 8, 442 common to all)
#      with held caches, which prefill the shared prefixes once, against without;
#   3. `sage demo` on the CUDA backend in f32 and in bf16, timed, with their tables (run
#      directories under target/gpu-check-runs);
#   4. two Nsight Compute profiles, GPU time per kernel (ncu serialises kernels: read the
#      shares, not the sums), each recording only from the mark transformer_bench sets
#      (`--profile-from-start off`): one training step after the warm-up step, and four
#      decoding steps of 64 sequences after the prefill of 64 x 512 prompt tokens, of the
#      Qwen2.5-0.5B shape in the bf16 mode (until 2026-11-28 the training profile held
#      the warm-up step too, and the decoding one the prefill and two steps).
# Measured on an H100 (2026-11-27): steps 1-2 about 140 s; 2026-11-26: each demo 36 s.
# SAGE_CHECK_STEPS picks the steps (default "parity bench demos profiles"), so that a
# call sharing a lease with another (e.g. scripts/gpu_smollm2_experiment.sh) can run
# "parity bench" alone.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-target/gpu-check}}"
BIN=target/cuda-bench
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH="/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SAGE_REQUIRE_CUDA=1 SAGE_REQUIRE_NVRTC=1 PYTHONUNBUFFERED=1
STEPS=" ${SAGE_CHECK_STEPS:-parity bench demos profiles} "
START=$SECONDS
FAILED=()

# Whether SAGE_CHECK_STEPS names step $1.
wanted() { [[ $STEPS == *" $1 "* ]]; }

# Runs "$@" with its output in OUT_DIR/NAME.log and says how it ended and how long it took.
step() {
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$OUT_DIR/$name.log" 2>&1
    local rc=$?
    echo "$name: rc $rc in $((SECONDS - start)) s"
    [ $rc = 0 ] || FAILED+=("$name")
    return $rc
}

for binary in parity_cuda nvrtc transformer_bench sage; do
    if [ ! -x "$BIN/$binary" ]; then
        echo "$BIN/$binary is missing: build it first (see the top of this script)" >&2
        exit 1
    fi
done
step nvidia-smi nvidia-smi
if wanted parity; then
    step nvrtc "$BIN/nvrtc" || grep -E "panicked" -A1 "$OUT_DIR/nvrtc.log" | head -20
    step parity "$BIN/parity_cuda" --test-threads=1 || grep -E "panicked" -A1 "$OUT_DIR/parity.log" | head -20
    grep -E "test result" "$OUT_DIR/parity.log"
fi
if wanted bench; then
    step bench python3 scripts/bench_cuda.py --no-install --skip-checks
    grep -E "^\||^device|^Decoding steps|^The dk/dv|^The query|^A decoding step" "$OUT_DIR/bench.log"
    step continue "$BIN/transformer_bench" continue qwen0.5b --seqs 64 --prompt 512 --new 128 \
        --backend cuda --precision bf16
    cat "$OUT_DIR/continue.log"
    step groups "$BIN/transformer_bench" groups qwen0.5b --seqs 64 --group 8 --prompt 1000 \
        --system 442 --new 128 --backend cuda --precision bf16
    cat "$OUT_DIR/groups.log"
fi
if wanted demos; then
    for precision in f32 bf16; do
        step "demo-$precision" "$BIN/sage" demo --backend cuda --precision "$precision" \
            --run-dir "target/gpu-check-runs/demo-$precision"
        grep -E "^(split|iid|test-normal)" "$OUT_DIR/demo-$precision.log" | head -4
    done
fi
if wanted profiles; then
    NCU=(ncu --clock-control none --profile-from-start off --print-summary per-kernel
        --metrics gpu__time_duration.sum)
    step profile-train "${NCU[@]}" "$BIN/transformer_bench" train qwen0.5b --batch 8 --seq 1024 \
        --steps 1 --backend cuda --precision bf16
    step profile-decode "${NCU[@]}" "$BIN/transformer_bench" decode qwen0.5b --seqs 64 --prompt 512 \
        --new 5 --backend cuda --precision bf16
    python3 scripts/ncu_kernels.py "$OUT_DIR/profile-train.log" "$OUT_DIR/profile-decode.log" |
        tee "$OUT_DIR/profiles.md"
fi
# The device tool brings back at most 8 files: the step logs travel as one archive.
(cd "$OUT_DIR" && tar czf logs.tar.gz ./*.log && rm -f ./*.log)
echo "done in $((SECONDS - START)) s; failed: ${FAILED[*]:-none}; logs in $OUT_DIR/logs.tar.gz"
[ ${#FAILED[@]} = 0 ]
