#!/usr/bin/env bash
# SmolLM2-135M-Instruct through the pipeline on one GPU (issue 35): import the GGUF,
# evaluate it zero-shot, fine-tune it with configs/smollm2.toml, evaluate it again. The
# GPU machine has no Rust toolchain and no network: build here, carry the binary and the
# model. The GGUF file (98 MB) and the CUDA build are more than one call may carry (64
# MiB), so they travel across two calls to a warm machine (ignored files stay between
# calls), packed by scripts/smollm2_parts.sh:
#
#   bash scripts/smollm2_parts.sh pack       # here, after the CUDA build (its header)
#   call 1, carrying target/smollm2-a: bash scripts/smollm2_parts.sh unpack (and, say,
#     bash scripts/gpu_check.sh)
#   call 2, carrying target/smollm2-b: bash scripts/gpu_smollm2.sh (it unpacks both parts)
#
# (On a machine with the whole file, SAGE_SMOLLM2_GGUF=path skips the parts.)
# Into OUT_DIR (default $OUT or target/gpu-smollm2): zero-shot.md, sft.md (the tables),
# the three logs, zero-shot.json and eval.json (every task's turns), sft-metrics.csv.
#
# Environment: SAGE_BIN (default target/cuda-bench/sage), SAGE_BACKEND (cuda; cpu tries
# the script without a GPU), SAGE_PRECISION (bf16; f32 on cpu), SAGE_RUNS (default
# /tmp/sage-smollm2), SAGE_CONFIG (default configs/smollm2.toml), SAGE_SKIP_ZERO_SHOT=1,
# SAGE_RL_STEPS (default 0: no RL; N runs N steps of SAGE RL from the SFT model for each
# learning rate of SAGE_RL_LRS, default the preset's, and the update-off control, all side
# by side; on an H100 a step alone took 16 s; into OUT_DIR: rl.md (the tables and each
# arm's sampled success against the control), rl-lrLR.log/.csv, rl-control.log/.csv),
# SAGE_SFT_LORA (a rank: SFT trains LoRA adapters of that rank on every projection, with
# alpha twice the rank, instead of every weight), SAGE_DATA_DOCS=1 (SFT data in which
# every first task reads the API docs it needs and scenarios vary in style, where the
# preset's data, the demo's, does neither; no deliberate mistakes, which cost iid on 2
# cores and bought nothing, docs/models.md "Mended mistakes"; 5 of the 7 test-normal
# templates call an API no training template calls, which only a model that reads the docs
# can find: docs/models.md). For the comparison, run the script twice side by side with
# their own SAGE_RUNS and output directories, once with SAGE_DATA_DOCS=1.
#
# Measured on an H100 (2026-11-26, docs/models.md): import 2 s, SFT 149 s (2 epochs; 82 s
# for the preset's one on 2026-11-27), the two evaluations 15 s (after SFT) and 80 s
# (zero-shot, which writes to the token limit); RL with SAGE_RL_STEPS=10 and three rates
# beside the control, 6.5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=$(mkdir -p "${1:-${OUT:-target/gpu-smollm2}}" && cd "${1:-${OUT:-target/gpu-smollm2}}" && pwd)
BIN=$(realpath "${SAGE_BIN:-target/cuda-bench/sage}")
BACKEND=${SAGE_BACKEND:-cuda}
PRECISION=${SAGE_PRECISION:-$([ "$BACKEND" = cuda ] && echo bf16 || echo f32)}
RUNS=${SAGE_RUNS:-/tmp/sage-smollm2}
CONFIG=$(realpath "${SAGE_CONFIG:-configs/smollm2.toml}")
if [ "${SAGE_DATA_DOCS:-0}" = 1 ]; then
    mkdir -p "$RUNS"
    DOCS_CONFIG=$RUNS/docs-data.toml
    sed 's/^prompt_rules = true$/prompt_rules = true\nread_docs = true\nvaried_style = true/' "$CONFIG" >"$DOCS_CONFIG"
    grep -q '^read_docs = true$' "$DOCS_CONFIG" || { echo "$CONFIG has no 'prompt_rules = true' line to put the docs settings after" >&2; exit 1; }
    CONFIG=$DOCS_CONFIG
fi
if [ -n "${SAGE_SFT_LORA:-}" ]; then
    mkdir -p "$RUNS"
    LORA_CONFIG=$RUNS/lora-sft.toml
    { cat "$CONFIG"; printf '\n[sft.lora]\nrank = %d\nalpha = %d\n' "$SAGE_SFT_LORA" $((2 * SAGE_SFT_LORA)); } >"$LORA_CONFIG"
    CONFIG=$LORA_CONFIG
fi
export LD_LIBRARY_PATH="/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START=$SECONDS
say() { echo "[$((SECONDS - START)) s] $*"; }
mkdir -p "$RUNS"
GGUF=${SAGE_SMOLLM2_GGUF:-}
if [ -f "$RUNS/model/config.json" ]; then
    say "the model imported by an earlier call: $RUNS/model"
elif [ -z "$GGUF" ]; then
    # The builds and the GGUF as scripts/smollm2_parts.sh packed them for two calls.
    GGUF=$(SAGE_RUNS=$RUNS bash scripts/smollm2_parts.sh unpack) || exit 1
    BIN=$(realpath "${SAGE_BIN:-target/cuda-bench/sage}")
fi
[ -x "$BIN" ] || { echo "$BIN is missing: build it first (see the top of this script)" >&2; exit 1; }
if [ ! -f "$RUNS/model/config.json" ]; then
    # The import checks every tensor's size against its type and shape, so a part
    # missing or cut short fails here, naming the tensor.
    "$BIN" import --gguf "$GGUF" --out "$RUNS/model" >"$OUT_DIR/import.log" 2>&1 || {
        echo "import failed (are both parts of the GGUF here? see the top of this script):" >&2
        tail -5 "$OUT_DIR/import.log" >&2
        exit 1
    }
    say "$(tail -1 "$OUT_DIR/import.log")"
fi

common=(--config "$CONFIG" --backend "$BACKEND" --precision "$PRECISION" --run-dir "$RUNS/run")
# Prints the table of an evaluation's log.
table() { awk '/^split/ { on = 1 } on && NF == 0 { exit } on' "$1"; }
if [ "${SAGE_SKIP_ZERO_SHOT:-0}" != 1 ]; then
    "$BIN" eval "${common[@]}" --checkpoint "$RUNS/model" --out "$OUT_DIR/zero-shot.json" \
        >"$OUT_DIR/zero-shot.log" 2>&1
    say "zero-shot evaluation: rc $?"
    table "$OUT_DIR/zero-shot.log" | tee "$OUT_DIR/zero-shot.md"
fi
if ! "$BIN" sft "${common[@]}" --init "$RUNS/model" >"$OUT_DIR/sft.log" 2>&1; then
    say "sft failed:"
    tail -5 "$OUT_DIR/sft.log"
    exit 1
fi
say "sft: $(grep -o "[0-9]* steps, final loss.*" "$OUT_DIR/sft.log" | tail -1)"
cp "$RUNS/run/metrics/sft.csv" "$OUT_DIR/sft-metrics.csv" 2>/dev/null
"$BIN" eval "${common[@]}" --out "$OUT_DIR/eval.json" >"$OUT_DIR/eval.log" 2>&1
say "evaluation after SFT: rc $?"
table "$OUT_DIR/eval.log" | tee "$OUT_DIR/sft.md"
if [ "${SAGE_RL_STEPS:-0}" -gt 0 ]; then
    # The update-off control and one RL arm per learning rate, side by side: the control
    # draws the same chains and random numbers as every arm, so one serves them all.
    SFT=$(ls -d "$RUNS"/run/checkpoints/step-* | tail -1)
    "$BIN" train "${common[@]}" --steps "$SAGE_RL_STEPS" --control >"$OUT_DIR/rl-control.log" 2>&1 &
    for lr in ${SAGE_RL_LRS:-$(sed -n 's/^learning_rate = //p' "$CONFIG")}; do
        sed "s/^learning_rate = .*/learning_rate = $lr/" "$CONFIG" >"$RUNS/rl-lr$lr.toml"
        "$BIN" train --config "$RUNS/rl-lr$lr.toml" --backend "$BACKEND" --precision "$PRECISION" \
            --run-dir "$RUNS/rl-lr$lr" --init "$SFT" --steps "$SAGE_RL_STEPS" \
            >"$OUT_DIR/rl-lr$lr.log" 2>&1 &
    done
    wait
    say "rl arms and their control finished"
    cp "$RUNS/run/rl-control/metrics/rl.csv" "$OUT_DIR/rl-control.csv" 2>/dev/null
    for log in "$OUT_DIR"/rl-control.log "$OUT_DIR"/rl-lr*.log; do
        arm=$(basename "$log" .log)
        [ "$arm" = rl-control ] || cp "$RUNS/$arm/rl/metrics/rl.csv" "$OUT_DIR/$arm.csv" 2>/dev/null
        { echo "$arm:"; grep -o "error: .*" "$log"; table "$log"; } | tee -a "$OUT_DIR/rl.md"
    done
    # Sampled success on the training chains per step (steps after the first: the first
    # samples before any update, the same in every arm), each arm against the control.
    python3 - "$OUT_DIR" <<'PY' | tee -a "$OUT_DIR/rl.md"
import csv, glob, os, sys
def success(path):
    with open(path) as f:
        return [float(r["success_all"]) for r in csv.DictReader(f)]
out = sys.argv[1]
control = success(os.path.join(out, "rl-control.csv"))
print("| arm | step-1 success % | success % after step 1 | control % | gain |")
print("| --- | --- | --- | --- | --- |")
for path in sorted(glob.glob(os.path.join(out, "rl-lr*.csv"))):
    arm = success(path)
    n = min(len(arm), len(control))
    mean = lambda xs: 100 * sum(xs) / max(len(xs), 1)
    print(f"| {os.path.basename(path)[:-4]} | {100 * arm[0]:.1f} | {mean(arm[1:n]):.1f} | "
          f"{mean(control[1:n]):.1f} | {mean(arm[1:n]) - mean(control[1:n]):+.1f} |")
PY
fi
say "done"
