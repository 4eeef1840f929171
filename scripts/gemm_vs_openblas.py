#!/usr/bin/env python3
"""The CPU backend's GEMM beside OpenBLAS (through NumPy) on the same cores, in rounds.

Each round runs, one after the other, NumPy's `np.matmul` into a preallocated output for
every shape and then `cargo bench -p sage-backend-cpu --bench gemm` (or the given builds
of that bench), at 2 threads and then at 1. The table printed at the end holds, per shape
and thread count, the median over rounds of each side's median GFLOP/s; the round-to-round
range shows how noisy the machine was. Only interleaved rounds compare on a shared VM.

Needs NumPy built on OpenBLAS (`pip install numpy==2.1.3`, the wheel BENCHMARKS.md used).
OpenBLAS picks its kernels by CPU; on a CPU it does not know (Zen 5) set
`OPENBLAS_CORETYPE=SkylakeX` for its AVX-512 kernels.

    python3 scripts/gemm_vs_openblas.py [--rounds 3] [--bench PATH ...]

`--bench` takes built bench binaries (`target/release/deps/gemm-*`) to compare builds;
without it the bench is built and run through cargo.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label in the bench's table, m, n, k, a transposed, b transposed)
SHAPES = [
    ("square 2048^3", 2048, 2048, 2048, False, False),
    ("tiny q/gate/up", 4096, 768, 256, False, True),
    ("tiny down", 4096, 256, 768, False, True),
    ("tiny logits: x", 4096, 4096, 256, False, True),
    ("tiny dX", 4096, 256, 768, False, False),
    ("tiny dW", 768, 256, 4096, True, False),
    ("smollm2 gate/up", 8192, 1536, 576, False, True),
    ("smollm2 down", 8192, 576, 1536, False, True),
    ("smollm2 dX", 8192, 576, 1536, False, False),
    ("smollm2 dW", 1536, 576, 8192, True, False),
]


def numpy_gflops(m, n, k, trans_a, trans_b, threads):
    """Median GFLOP/s of np.matmul over 7 timed batches, in a child process."""
    code = f"""
import time, numpy as np
rng = np.random.default_rng(0)
a = rng.random(({k}, {m}) if {trans_a} else ({m}, {k}), dtype=np.float32)
b = rng.random(({n}, {k}) if {trans_b} else ({k}, {n}), dtype=np.float32)
a, b = (a.T if {trans_a} else a), (b.T if {trans_b} else b)
c = np.empty(({m}, {n}), dtype=np.float32)
start = time.perf_counter(); np.matmul(a, b, out=c); once = time.perf_counter() - start
reps = max(1, int(0.25 / max(once, 1e-6)))
rates = []
for _ in range(7):
    start = time.perf_counter()
    for _ in range(reps):
        np.matmul(a, b, out=c)
    rates.append(2 * {m} * {n} * {k} / ((time.perf_counter() - start) / reps) / 1e9)
print(sorted(rates)[3])
"""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def bench_gflops(command, threads):
    """{label prefix: f32 GFLOP/s} from one run of the gemm bench, whose rows end with the
    f32 time and rate, then the bf16 time, rate and speed-up."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True,
                         cwd=ROOT).stdout
    rates = {}
    for line in out.splitlines():
        for label, *_ in SHAPES:
            if line.startswith(label):
                rates[label] = float(line.split()[-4])
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bench", nargs="*", help="built gemm bench binaries to compare")
    args = parser.parse_args()
    if args.bench:
        sides = {os.path.basename(os.path.dirname(p)) or p: [p] for p in args.bench}
    else:
        sides = {"sage": ["cargo", "bench", "-q", "-p", "sage-backend-cpu", "--bench", "gemm"]}
    results = {}  # (threads, label, side) -> [GFLOP/s per round]
    for threads in (2, 1):
        for round_ in range(args.rounds):
            for label, m, n, k, ta, tb in SHAPES:
                rate = numpy_gflops(m, n, k, ta, tb, threads)
                results.setdefault((threads, label, "OpenBLAS"), []).append(rate)
            for side, command in sides.items():
                for label, rate in bench_gflops(command, threads).items():
                    results.setdefault((threads, label, side), []).append(rate)
            print(f"threads {threads}, round {round_ + 1} done", file=sys.stderr, flush=True)
            time.sleep(1)
    names = ["OpenBLAS"] + list(sides)
    print("| threads | shape | " + " | ".join(names) + " | "
          + " | ".join(f"{s} / OpenBLAS" for s in sides) + " |")
    print("| --- " * (2 + len(names) + len(sides)) + "|")
    for threads in (2, 1):
        for label, *_ in SHAPES:
            cells, medians = [], {}
            for name in names:
                rates = results.get((threads, label, name), [])
                if rates:
                    medians[name] = statistics.median(rates)
                    cells.append(f"{medians[name]:.0f} ({min(rates):.0f}-{max(rates):.0f})")
                else:
                    cells.append("")
            ratios = [f"{medians[s] / medians['OpenBLAS']:.2f}x" if s in medians else ""
                      for s in sides]
            print(f"| {threads} | {label} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
