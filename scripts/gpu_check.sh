#!/usr/bin/env bash
# Everything issue 20's work needs checked and timed on a GPU, in one call of a few
# minutes. The GPU machine has no Rust toolchain: build here first, then carry
# target/cuda-bench (ignored by git; stripped, about 22 MB) to the GPU machine and run
# this script there.
#
#   python3 scripts/bench_cuda.py --build-only          # parity_cuda, nvrtc, transformer_bench
#   cargo build --release --features cuda --bin sage && cp target/release/sage target/cuda-bench/
#   strip target/cuda-bench/*                            # debug line tables: sage is 114 MB, 17 MB stripped
#   bash scripts/gpu_check.sh [OUT_DIR]                 # on the GPU machine (default $OUT or target/gpu-check)
#
# It runs, each step's output in OUT_DIR and a line per step on stdout:
#   1. nvidia-smi, the NVRTC test and the CUDA parity tests (a missing device fails);
#   2. scripts/bench_cuda.py --no-install: the bf16 mode against PyTorch on the same GPU
#      (training, decoding, the time per decoding step), with issue 20's targets;
#   3. `sage demo` on the CUDA backend in f32 and in bf16, timed, with their tables (run
#      directories under target/gpu-check-runs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-target/gpu-check}}"
BIN=target/cuda-bench
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH="/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SAGE_REQUIRE_CUDA=1 SAGE_REQUIRE_NVRTC=1

# Runs "$@" with its output in OUT_DIR/NAME.log and says how it ended and how long it took.
step() {
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$OUT_DIR/$name.log" 2>&1
    local rc=$?
    echo "$name: rc $rc in $((SECONDS - start)) s"
    return $rc
}

for binary in parity_cuda nvrtc transformer_bench sage; do
    if [ ! -x "$BIN/$binary" ]; then
        echo "$BIN/$binary is missing: build it first (see the top of this script)" >&2
        exit 1
    fi
done
step nvidia-smi nvidia-smi
step nvrtc "$BIN/nvrtc"
if ! step parity "$BIN/parity_cuda" --test-threads=1; then
    tail -40 "$OUT_DIR/parity.log"
    exit 1
fi
grep -E "test result|FAILED" "$OUT_DIR/parity.log"
step bench python3 scripts/bench_cuda.py --no-install
grep -E "^\||^device" "$OUT_DIR/bench.log"
for precision in f32 bf16; do
    step "demo-$precision" "$BIN/sage" demo --backend cuda --precision "$precision" \
        --run-dir "target/gpu-check-runs/demo-$precision"
    grep -E "^(split|iid|test-normal)" "$OUT_DIR/demo-$precision.log" | head -4
done
