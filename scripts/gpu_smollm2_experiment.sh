#!/usr/bin/env bash
# The paper's comparison from SmolLM2-135M-Instruct on one GPU (issues 34 and 35):
# `configs/experiment-smollm2.toml` through scripts/gpu_experiment.sh, on the second of
# the two calls that scripts/smollm2_parts.sh packs for (call 1 carried
# target/smollm2-a, this call carries target/smollm2-b). It rebuilds target/cuda-bench
# and the GGUF file, imports the model into models/smollm2 (the preset's `[experiment]
# init`), then runs the experiment in bf16 until SAGE_DEADLINE (default 420 s) and writes
# its table, JSON and logs into OUT_DIR (default $OUT or target/gpu-smollm2-experiment).
#
# The preset's whole table (5 arms x 3 seeds, every RL arm beside its control) is more
# than one call of 10 minutes: on an H100 one SmolLM2 RL step took 16 s alone, 25-50 s
# with four processes side by side, and the SFT 82 s (docs/models.md). On an H200
# (2026-11-28) one call of all four arms of one seed saved both SFT models 110 s in,
# and no arm had finished its RL, control and evaluation 290 s later, at its deadline.
# An arm a deadline stops runs again whole on resume, so a first table goes by stage:
# this call with the SFT models and their evaluations alone (about 3-4 minutes),
#
#   SAGE_SEEDS=1 SAGE_ARMS="sft-only sft-direct" bash scripts/gpu_smollm2_experiment.sh
#
# then, on the machine it left warm, a call carrying nothing that runs the RL arms from
# its runs directory for the rest of the lease:
#
#   SAGE_PRECISION=bf16 SAGE_SEEDS=1 SAGE_ARMS="grpo-no-skills sage" SAGE_DEADLINE=520 \
#       SAGE_FROM=/tmp/sage-gpu-experiment SAGE_RUNS=/tmp/sage-gpu-experiment-2 \
#       bash scripts/gpu_experiment.sh configs/experiment-smollm2.toml
#
# Each finished (arm, seed) prints a line with its greedy TGC / SGC as it finishes, so
# a call that runs out of time still says what finished. SAGE_SEEDS, SAGE_ARMS,
# SAGE_DEADLINE, SAGE_GRACE and SAGE_RUNS are scripts/gpu_experiment.sh's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-target/gpu-smollm2-experiment}}
START=$SECONDS
gguf=$(bash scripts/smollm2_parts.sh unpack) || exit 1
[ -n "$gguf" ] || { echo "the GGUF's second part is missing: carry target/smollm2-b" >&2; exit 1; }
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH="/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
target/cuda-bench/sage import --gguf "$gguf" --out models/smollm2 >"$OUT_DIR/import.log" 2>&1 || {
    tail -5 "$OUT_DIR/import.log" >&2
    exit 1
}
echo "[$((SECONDS - START)) s] imported: $(tail -1 "$OUT_DIR/import.log")"
SAGE_PRECISION=${SAGE_PRECISION:-bf16} SAGE_DEADLINE=${SAGE_DEADLINE:-420} \
    bash scripts/gpu_experiment.sh configs/experiment-smollm2.toml "$OUT_DIR"
