"""GPU time per kernel from Nsight Compute's per-kernel summary (`ncu --print-summary
per-kernel --metrics gpu__time_duration.sum`, as scripts/gpu_check.sh runs it): each
kernel's calls times its average, cuBLAS's own kernels summed as one row, the largest
first, as a markdown table. ncu serialises kernels, so read the shares, not the sum.

    python3 scripts/ncu_kernels.py profile-train.log [profile-decode.log ...] [--rows N]
"""

import argparse
import collections
import re

TO_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0,
         "msecond": 1.0, "s": 1e3, "second": 1e3}
# A kernel's heading line in the summary: its name, grid and block, then its calls.
HEADING = re.compile(r"^\s\s(\S+) \(.*Invocations (\d+)")
DURATION = re.compile(r"^\s+gpu__time_duration\.sum\s+(\w+)\s+\S+\s+\S+\s+([\d.,]+)")


def kernel_times(path):
    """GPU milliseconds and calls per kernel name in the summary at `path`."""
    milliseconds, calls = collections.Counter(), collections.Counter()
    name, invocations = None, 0
    with open(path, errors="replace") as log:
        for line in log:
            heading = HEADING.match(line)
            if heading:
                name, invocations = heading.group(1), int(heading.group(2))
                continue
            duration = DURATION.match(line)
            if duration and name:
                unit, average = duration.group(1), float(duration.group(2).replace(",", ""))
                if unit not in TO_MS:
                    raise SystemExit(f"{path}: unknown time unit `{unit}`")
                key = "cuBLAS GEMMs" if name.startswith(("nvjet", "sm90_", "cutlass")) else name
                milliseconds[key] += average * TO_MS[unit] * invocations
                calls[key] += invocations
                name = None
    return milliseconds, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--rows", type=int, default=14)
    args = parser.parse_args()
    for path in args.logs:
        try:
            milliseconds, calls = kernel_times(path)
        except OSError as error:
            print(f"{path}: {error.strerror}")
            continue
        total = sum(milliseconds.values())
        if not total:
            print(f"{path}: no per-kernel summary found")
            continue
        print(f"{path}: {total:.1f} ms of GPU time in {sum(calls.values())} kernels\n")
        print("| kernel | calls | GPU ms | share |")
        print("| --- | --- | --- | --- |")
        for kernel, ms in milliseconds.most_common(args.rows):
            print(f"| {kernel} | {calls[kernel]} | {ms:.2f} | {100 * ms / total:.1f}% |")
        print()


if __name__ == "__main__":
    main()
