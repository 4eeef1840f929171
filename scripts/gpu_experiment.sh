#!/usr/bin/env bash
# A `sage experiment` table on one GPU (issue 34): both SFT models and every arm of one
# preset, run as parallel processes on the GPU, then merged into one run directory and
# its table; optionally, probes of other SFT recipes beside them. The GPU machine has no
# Rust toolchain: build here, carry target/cuda-bench (ignored by git):
#
#   cargo build --release --features cuda --bin sage
#   mkdir -p target/cuda-bench && cp target/release/sage target/cuda-bench/ && strip target/cuda-bench/sage
#   bash scripts/gpu_experiment.sh configs/experiment-mechanism.toml      # on the GPU machine
#   bash scripts/gpu_experiment.sh configs/experiment-default.toml        # the default experiment
#
# Measured on an H100 (2026-11-26, docs/results.md): the default experiment's plain-code
# SFT model took 2.8 minutes with three SAGE arms beside it, an (arm, seed) with its
# control and 435-task evaluation 1.5 minutes with five others beside it and 4.6 with
# eleven (the processes share the GPU by time-slicing); the whole table (the
# skill model's SFT carried in from the VM) took two calls of 4.5 and 4.8 minutes. A
# later call continues an earlier one's run directory: carry its run.tar.gz.part-* and
# name their folder in SAGE_FROM, or, on the machine the earlier call left warm, name
# that call's SAGE_RUNS in SAGE_FROM and give this one another SAGE_RUNS (a pretrained
# model's run, too large to bring back, continues so); SAGE_ARMS picks the arms of
# this call.
# On an H200 (2026-11-28) the default preset (420 seeds x 3 epochs and an anneal, 1,497
# iid tasks per evaluation) does not fit one call: the skill model and its anneal took
# 177 s, the plain-code model 242 s and its anneal was at step 2,504 of 5,654 at the
# 360 s deadline (48k tokens/s beside fifteen arm processes); those fifteen processes
# ran an update-off control's 16 steps in about 170 s each, and sft-only's evaluation
# took 200 s. So about 13-15 minutes for the table: two calls, whose run directory
# (81 MB with the plain-code model's checkpoint) is more than one call brings back.
# Since 2026-12-01 the default preset gives the skill model the plain-code model's steps
# (`[experiment] equal_sft_steps`), so its SFT takes about as long as the plain-code one,
# and each of the two SFT processes also writes the other mode's expert data to size
# them.
#
# Stages (each process's log in OUT_DIR/logs.tar.gz, a line per stage on stdout):
#   1. the SFT models this call's arms start from that the run lacks (all of them, or
#      those SAGE_FROM's run has not finished): the skill (or mixed) model in the run
#      directory, and once its tokenizer is saved, the plain-code model beside it (a copy
#      resumed with the same tokenizer and run id), each followed by its anneal when the
#      preset has `[experiment.anneal]`, then the evaluation of seed 0 of `sft-only`
#      (or `sft-direct`) from it; each probe's `sage demo`;
#   2. every (arm, seed) of this call not yet finished in its own copy of the run
#      directory (`--resume --arms ARM --only-seed SEED`), started as soon as the model
#      it starts from (the annealed one, with an anneal) is saved;
#   3. the results moved into the run directory and one more `--resume` that reuses
#      them all and writes the table of every arm finished under every seed,
#      experiment.json and the plots.
# Into OUT_DIR: experiment.md, experiment.json, probes.md, logs.tar.gz, and the run
# directory without its expert data, with the last checkpoint of an SFT model the
# deadline stopped, as run.tar.gz.part-* (`cat run.tar.gz.part-* | tar xz`
# gives a directory that `sage experiment --config PRESET --resume --run-dir DIR` continues
# on any backend, or the next call through SAGE_FROM).
#
# While it runs, a line on stdout for each (arm, seed) as it finishes, with its greedy
# TGC / SGC per split, and OUT_DIR/progress.tar.gz (the logs and every finished arm's
# run.json) every 30 s: a device call that its own time limit ends still brings back
# what finished (on 2026-11-28 a SmolLM2 call ran past its limit and brought back
# nothing).
#
# Environment: SAGE_BIN (default target/cuda-bench/sage), SAGE_BACKEND (cuda; cpu tries
# the script on a machine without a GPU), SAGE_PRECISION (the preset's `[run] precision`
# unless set: f32 or bf16), SAGE_SEEDS (seeds of this call, default the preset's),
# SAGE_DEADLINE (seconds for stages 1 and 2, default 500; at the deadline each process
# gets SIGTERM, which an SFT stage answers by saving a checkpoint at its next step,
# and SAGE_GRACE seconds later, default 30, SIGKILL, which ends an arm in the middle of
# its RL or evaluation: the whole script ends by about DEADLINE + GRACE + 120 s, the
# table's stage included; give the device call that much and more), SAGE_RUNS (where
# runs are written, default /tmp/sage-gpu-experiment), SAGE_FROM (a folder holding an earlier call's run.tar.gz.part-*, or an earlier call's
# SAGE_RUNS on this machine), SAGE_ARMS
# (space-separated arms of this call, default the preset's), SAGE_PROBES (space-separated
# SEEDSxEPOCHS recipes of `sage demo` on configs/sft-copying.toml, e.g. "420x3 240x3
# 420x2"; none by default), SAGE_SAMPLED_SEEDS (sampled evaluations of each probe at
# temperature 1, default 10).
set -uo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:?usage: scripts/gpu_experiment.sh PRESET.toml [OUT_DIR]}
OUT_DIR=$(mkdir -p "${2:-${OUT:-target/gpu-experiment}}" && cd "${2:-${OUT:-target/gpu-experiment}}" && pwd)
PRESET=$(cd "$(dirname "$PRESET")" && pwd)/$(basename "$PRESET")
BIN=$(realpath "${SAGE_BIN:-target/cuda-bench/sage}")
BACKEND=${SAGE_BACKEND:-cuda}
PRECISION=(${SAGE_PRECISION:+--precision "$SAGE_PRECISION"})
DEADLINE=${SAGE_DEADLINE:-500}
GRACE=${SAGE_GRACE:-30}
RUNS=${SAGE_RUNS:-/tmp/sage-gpu-experiment}
PROBES=${SAGE_PROBES:-}
FROM=${SAGE_FROM:+$(realpath "$SAGE_FROM")}
SAMPLED_SEEDS=${SAGE_SAMPLED_SEEDS:-10}
export LD_LIBRARY_PATH="/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Many processes share the machine's cores: each keeps to a few threads.
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-2}
# The two SFT processes of stage 1 solve their expert data on half the cores each (on an
# H100 machine the 840-seed data took 97 s on one thread).
SFT_THREADS=$(($(nproc) / 2 > 2 ? $(nproc) / 2 : 2))
START=$SECONDS
[ -x "$BIN" ] || { echo "$BIN is missing: build it first (see the top of this script)" >&2; exit 1; }

NAME=$(basename "$PRESET" .toml)
BASE=$RUNS/$NAME
LOGS=$RUNS/logs
if [ -n "$FROM" ] && [ "$FROM" = "$(realpath -m "$RUNS")" ]; then
    echo "SAGE_FROM is this call's SAGE_RUNS, which a call empties first: give it another SAGE_RUNS" >&2
    exit 1
fi
rm -rf "$RUNS"
mkdir -p "$BASE" "$LOGS"
say() { echo "[$((SECONDS - START)) s] $*"; }
# A line for each (arm, seed) finished in any copy of the run directory since the last
# call (those reported are listed in logs/reported), and the logs with every finished
# arm's run.json into OUT_DIR/progress.tar.gz.
report_progress() {
    local finished line
    local summary='import json, sys
run = json.load(open(sys.argv[1]))["result"]
splits = ", ".join("%s %.1f / %.1f" % (m["split"], m["tgc"], m["sgc"]) for m in run["metrics"])
print("%s-%s: %s (greedy TGC / SGC)" % (run["arm"], run["seed"], splits))'
    touch "$LOGS/reported"
    for finished in "$RUNS"/*/seed-*/*/run.json; do
        [ -f "$finished" ] || continue
        grep -qxF "$finished" "$LOGS/reported" && continue
        line=$(python3 -c "$summary" "$finished") || continue
        echo "$finished" >>"$LOGS/reported"
        say "finished $line"
    done
    (cd "$RUNS" && find . -path '*/seed-*/*' -name run.json -print0 |
        tar czf "$OUT_DIR/progress.tar.gz.tmp" --null -T - logs 2>/dev/null) &&
        mv "$OUT_DIR/progress.tar.gz.tmp" "$OUT_DIR/progress.tar.gz"
}
# report_progress every 30 s until killed (its sleep with it: a sleep left behind would
# hold the call's output open).
watch_progress() {
    local sleeper
    trap 'kill $sleeper 2>/dev/null; exit 0' TERM
    while true; do
        sleep 30 &
        sleeper=$!
        wait "$sleeper"
        report_progress
    done
}
# Seconds left before the deadline (at least 1: `timeout 0` would never stop).
left() { local s=$((DEADLINE - (SECONDS - START))); echo $((s > 0 ? s : 1)); }
# The arms and seed count the preset names (the defaults where it names none).
read -r -a ARMS < <("$BIN" config --print --config "$PRESET" | python3 -c '
import sys, tomllib
experiment = tomllib.loads(sys.stdin.read())["experiment"]
anneal = experiment.get("anneal", {}).get("epochs", 0)
if experiment.get("sft_per_seed"):
    sys.exit("[experiment] sft_per_seed: this script trains one SFT model per mode; run sage experiment itself")
print(" ".join(experiment["arms"]), experiment["skill_data"], experiment["seeds"], anneal)')
[ ${#ARMS[@]} -ge 4 ] || exit 1
ANNEAL=${ARMS[-1]}
SEEDS=${SAGE_SEEDS:-${ARMS[-2]}}
SKILL_MODE=${ARMS[-3]}
unset 'ARMS[-1]'
unset 'ARMS[-1]'
unset 'ARMS[-1]'
read -r -a CALL_ARMS <<<"${SAGE_ARMS:-${ARMS[*]}}"
say "preset $NAME: arms ${ARMS[*]}, $SEEDS seeds, backend $BACKEND; this call: ${CALL_ARMS[*]}"
# How busy the GPU is while the processes share it (logs.tar.gz: logs/gpu.csv).
if command -v nvidia-smi >/dev/null && [ "$BACKEND" = cuda ]; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 >"$LOGS/gpu.csv" 2>&1 &
    SMI_PID=$!
fi
trap 'kill ${SMI_PID:-} ${WATCH_PID:-} 2>/dev/null' EXIT
watch_progress &
WATCH_PID=$!
experiment() { # DIR LOG ARGS...
    local dir=$1 log=$2
    shift 2
    timeout -k "$GRACE" "$(left)" "$BIN" experiment --config "$PRESET" --backend "$BACKEND" "${PRECISION[@]}" \
        --run-dir "$dir" "$@" >"$LOGS/$log.log" 2>&1
}

# --- probes: `sage demo` on cheaper copying recipes, then sampled evaluations ---
probe() { # SEEDS EPOCHS
    local seeds=$1 epochs=$2 dir="$RUNS/probe-${1}x$2"
    mkdir -p "$dir"
    sed -e "s|^dir = .*|dir = \"$dir\"|" -e "s|^seeds = .*|seeds = $seeds|" \
        -e "s|^epochs = .*|epochs = $epochs|" configs/sft-copying.toml >"$dir/probe.toml"
    sed -i "s|^\[run\]|[run]\ncheckpoint_every = 0|" "$dir/probe.toml"
    timeout -k "$GRACE" "$(left)" "$BIN" demo --config "$dir/probe.toml" --backend "$BACKEND" \
        >"$LOGS/probe-${seeds}x$epochs.log" 2>&1 || return 1
    for seed in $(seq 1 "$SAMPLED_SEEDS"); do
        sed -e "s|^\[eval\]|[eval]\nseed = $seed\nsplits = [\"iid\"]|" "$dir/probe.toml" >"$dir/sampled.toml"
        printf '\n[eval.rollout]\ntemperature = 1.0\n' >>"$dir/sampled.toml"
        timeout -k "$GRACE" "$(left)" "$BIN" eval --config "$dir/sampled.toml" --backend "$BACKEND" \
            --out "$dir/sampled-$seed.json" >"$LOGS/probe-${seeds}x$epochs-sampled-$seed.log" 2>&1 || return 1
    done
}
PROBE_PIDS=()
for recipe in $PROBES; do
    probe "${recipe%x*}" "${recipe#*x}" &
    PROBE_PIDS+=($!)
done

# --- stage 1: the SFT models (or an earlier call's run directory) ------------------
# An arm starts from the skill (or mixed) model, or from the direct one.
arm_mode() { case $1 in sft-direct | grpo-no-skills) echo direct ;; *) echo "$SKILL_MODE" ;; esac; }
needs_mode() { # MODE: does an arm of this call start from it?
    local arm
    for arm in "${CALL_ARMS[@]}"; do [ "$(arm_mode "$arm")" = "$1" ] && return 0; done
    return 1
}
# The SFT stage whose model MODE's arms start from: with [experiment.anneal], its anneal.
start_stage() { if [ "$ANNEAL" -gt 0 ]; then echo "sft-$1-annealed"; else echo "sft-$1"; fi; }
sft_done() { [ -f "$BASE/$(start_stage "$1")/finished.json" ]; }
if [ -d "$FROM/$NAME" ]; then
    # An earlier call's runs on this machine: its merged run directory.
    rm -rf "$BASE" && cp -a "$FROM/$NAME" "$BASE" || { echo "cannot copy $FROM/$NAME" >&2; exit 1; }
elif [ -n "$FROM" ]; then
    cat "$FROM"/run.tar.gz.part-* | tar xz -C "$RUNS" || { echo "cannot unpack $FROM/run.tar.gz.part-*" >&2; exit 1; }
fi
[ -n "$FROM" ] && say "continuing the run of $FROM: $(ls "$BASE"/sft-*/finished.json 2>/dev/null | wc -l) SFT models"
SKILL_PID=
if needs_mode "$SKILL_MODE" && ! sft_done "$SKILL_MODE"; then
    RAYON_NUM_THREADS=$SFT_THREADS experiment "$BASE" sft-skill ${FROM:+--resume} --arms sft-only --seeds 1 &
    SKILL_PID=$!
fi
DIRECT_PID=
if needs_mode direct && ! sft_done direct; then
    while [ ! -f "$BASE/tokenizer-finished.json" ] && [ -n "$SKILL_PID" ] && kill -0 "$SKILL_PID" 2>/dev/null; do sleep 1; done
    if [ -f "$BASE/tokenizer-finished.json" ]; then
        mkdir -p "$BASE-direct"
        cp "$BASE"/experiment-settings.json "$BASE"/tokenizer.json "$BASE"/tokenizer-finished.json "$BASE-direct/"
        # An earlier call's unfinished direct model (or anneal) continues from its checkpoint.
        for stage in sft-direct sft-direct-annealed; do
            [ -d "$BASE/$stage" ] && cp -r "$BASE/$stage" "$BASE-direct/"
        done
        RAYON_NUM_THREADS=$SFT_THREADS experiment "$BASE-direct" sft-direct --resume --arms sft-direct --seeds 1 &
        DIRECT_PID=$!
    fi
fi

# --- stage 2: every (arm, seed) of this call in its own copy, once its model is ready -
# (`--only-seed`); the copies share the run id, so stage 3 can move their results back.
launch() { # ARM SEED
    local dir=$RUNS/$1-$2
    [ -f "$BASE/seed-$2/$1/run.json" ] && return # finished by an earlier call
    # A stage-1 process of this call goes on to evaluate seed 0 of its `--arms` once its
    # model is trained: that arm does not run twice.
    case "$1-$2" in
        sft-only-0) [ -n "$SKILL_PID" ] && return ;;
        sft-direct-0) [ -n "$DIRECT_PID" ] && return ;;
    esac
    mkdir -p "$dir"
    COPIES+=("$dir")
    (cd "$BASE" && tar cf - --warning=no-file-changed --exclude='./sft-*/data' --exclude='./seed-*' .) | tar xf - -C "$dir"
    experiment "$dir" "$1-$2" --resume --arms "$1" --seeds "$SEEDS" --only-seed "$2" &
    PIDS+=($!)
    NAMES+=("$1-$2")
}
PIDS=()
NAMES=()
COPIES=("$BASE-direct")
launch_mode() { # MODE: every (arm, seed) of this call that starts from MODE's model
    local arm seed
    for arm in "${CALL_ARMS[@]}"; do
        [ "$(arm_mode "$arm")" = "$1" ] || continue
        for seed in $(seq 0 $((SEEDS - 1))); do launch "$arm" "$seed"; done
    done
}
# Waits until the model MODE's arms start from is saved (or its process ended), then
# starts its arms.
when_trained() { # MODE PID SOURCE_DIR
    local ready
    ready=$3/$(start_stage "$1")/finished.json
    while [ ! -f "$ready" ] && [ -n "$2" ] && kill -0 "$2" 2>/dev/null; do sleep 2; done
    if [ ! -f "$ready" ]; then
        say "sft on $1 trajectories did not finish:"
        tail -n 20 "$LOGS"/sft-*.log
        return 1
    fi
    if [ "$3" != "$BASE" ]; then
        (cd "$3" && tar cf - --exclude='./sft-*/data' "sft-$1"*) | tar xf - -C "$BASE"
    fi
    say "sft on $1 trajectories: ready"
    launch_mode "$1"
}
needs_mode "$SKILL_MODE" && when_trained "$SKILL_MODE" "$SKILL_PID" "$BASE"
# The direct model trains in its own copy, unless the run already holds it.
needs_mode direct && when_trained direct "$DIRECT_PID" "$([ -n "$DIRECT_PID" ] && echo "$BASE-direct" || echo "$BASE")"
for i in "${!PIDS[@]}"; do
    wait "${PIDS[$i]}"
    say "${NAMES[$i]}: rc $?"
done
[ -n "$SKILL_PID" ] && { wait "$SKILL_PID"; say "sft-skill: rc $?"; }
[ -n "$DIRECT_PID" ] && { wait "$DIRECT_PID"; say "sft-direct: rc $?"; }

kill "$WATCH_PID" 2>/dev/null
report_progress

# --- stage 3: one run directory and its table ---------------------------------------
for dir in "${COPIES[@]}"; do
    for finished in "$dir"/seed-*/*/run.json; do
        [ -f "$finished" ] || continue
        arm_dir=$(dirname "$finished")
        seed_dir=$BASE/$(basename "$(dirname "$arm_dir")")
        mkdir -p "$seed_dir"
        for part in "$arm_dir" "$arm_dir-control"; do
            [ -d "$part" ] && rm -rf "${seed_dir:?}/$(basename "$part")" && mv "$part" "$seed_dir/"
        done
    done
done
finished=()
for arm in "${ARMS[@]}"; do
    whole=1
    for seed in $(seq 0 $((SEEDS - 1))); do
        [ -f "$BASE/seed-$seed/$arm/run.json" ] || whole=0
    done
    [ "$whole" = 1 ] && finished+=("$arm")
done
say "arms finished under every seed: ${finished[*]:-none}"
if [ ${#finished[@]} -gt 0 ]; then
    # Every arm named is finished: this reuses them and writes the table.
    timeout -k 10 120 "$BIN" experiment --config "$PRESET" --backend "$BACKEND" "${PRECISION[@]}" \
        --run-dir "$BASE" --resume --arms "$(IFS=,; echo "${finished[*]}")" --seeds "$SEEDS" >"$LOGS/table.log" 2>&1
    say "table: rc $?"
    cp "$BASE/experiment.md" "$BASE/experiment.json" "$OUT_DIR/" 2>/dev/null
    cat "$BASE/experiment.md" 2>/dev/null
fi

# --- the probes' results ---------------------------------------------------------
for pid in "${PROBE_PIDS[@]}"; do wait "$pid"; done
if [ -n "$PROBES" ]; then
    python3 - "$RUNS" $PROBES >"$OUT_DIR/probes.md" <<'EOF'
import json, pathlib, statistics, sys
runs = pathlib.Path(sys.argv[1])
print("| recipe | greedy iid TGC / SGC | 95% CI of TGC | copied % | sampled iid TGC (mean ± std, seeds) | sampled copied % |")
print("| --- | --- | --- | --- | --- | --- |")
for recipe in sys.argv[2:]:
    d = runs / f"probe-{recipe}"
    try:
        greedy = next(r["metrics"] for r in json.loads((d / "eval.json").read_text()) if r["metrics"]["split"] == "iid")
    except (OSError, StopIteration, ValueError):
        print(f"| {recipe} | did not finish | | | | |")
        continue
    sampled = [json.loads(p.read_text())[0]["metrics"] for p in sorted(d.glob("sampled-*.json"))]
    tgc = [m["tgc"] for m in sampled]
    cell = lambda v: f"{statistics.mean(v):.1f} ± {statistics.pstdev(v):.1f} ({len(v)})" if v else "-"
    ci = greedy.get("tgc_interval", {})
    print(f"| {recipe} | {greedy['tgc']:.1f} / {greedy['sgc']:.1f} | [{ci.get('low', 0):.1f}, {ci.get('high', 0):.1f}] "
          f"| {greedy['values_copied']:.1f} | {cell(tgc)} | {cell([m['values_copied'] for m in sampled])} |")
EOF
    cat "$OUT_DIR/probes.md"
fi

# --- what comes back -------------------------------------------------------------
grep -H -E "sft: final loss|error" "$LOGS"/*.log | head -20
tar czf "$OUT_DIR/logs.tar.gz" -C "$RUNS" logs
rm -f "$OUT_DIR"/progress.tar.gz*
# A direct model the deadline stopped travels with its last checkpoint (the deadline's
# SIGTERM saves one), so a later call or `--resume` on the CPU continues it; a finished
# SFT stage has removed its checkpoints.
if [ -d "$BASE-direct/sft-direct" ] && ! sft_done direct; then
    rm -rf "$BASE/sft-direct" "$BASE/sft-direct-annealed"
    (cd "$BASE-direct" && tar cf - --exclude='./sft-*/data' sft-direct*) | tar xf - -C "$BASE"
fi
# A run of a pretrained model's SFT models (540 MB each for SmolLM2) is far more than a
# call brings back, and packing it would eat the call's time: then only its results.
if [ "$(du -sm --exclude=data "$BASE" | cut -f1)" -le 200 ]; then
    (cd "$RUNS" && tar czf - --exclude='*/data' "$NAME") |
        split -b 15m - "$OUT_DIR/run.tar.gz.part-"
else
    say "the run directory is over 200 MB: not packed (experiment.json and the logs hold the results)"
fi
# The device tool brings back at most 64 MiB (8 files): say when the run does not fit.
total=$(cat "$OUT_DIR"/* | wc -c)
[ "$total" -gt $((62 * 1024 * 1024)) ] && echo "OUT_DIR holds $total bytes: more than one call brings back" >&2
ls -la "$OUT_DIR"
say "done"
