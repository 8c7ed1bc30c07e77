#!/usr/bin/env python3
"""accel's reductions against numpy's, in the same run (docs/PERFORMANCE.md, "Reductions").

For N float32 elements (default 64 Mi) already in an accel buffer: x.sum(), x.max() and
x.mean() read back as a Python float (one accel_reduction and one 4-byte read each), and the
same array seen as a square-ish matrix summed along axis 0 and axis 1; numpy's np.sum etc. on
the same data in this process. Medians over repetitions, as GB/s of input read, and the ratio
accel / numpy (above 1: accel is faster).

Usage: bench_reduce.py [--url URL] [--mi N] [--reps N]   (default embedded:?backends=cpu)
"""
import argparse
import statistics
import time

import numpy as np

import accel


def median_seconds(fn, reps):
    fn()  # warm: page faults, first-use setup
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="embedded:?backends=cpu")
    p.add_argument("--mi", type=int, default=64)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    n = args.mi << 20
    rows = 1 << ((n.bit_length() - 1) // 2)
    host = np.random.default_rng(1).random(n, dtype=np.float32)
    mat = host.reshape(rows, n // rows)
    with accel.open(args.url) as ctx:
        x = ctx.asarray(host)
        m = x.reshape(rows, n // rows)
        cases = [
            ("sum, all", lambda: float(x.sum()), lambda: float(np.sum(host))),
            ("max, all", lambda: float(x.max()), lambda: float(np.max(host))),
            ("mean, all", lambda: float(x.mean()), lambda: float(np.mean(host))),
            (f"sum, axis 0 of {rows} x {n // rows}", lambda: m.sum(axis=0).numpy(),
             lambda: np.sum(mat, axis=0)),
            (f"sum, axis 1 of {rows} x {n // rows}", lambda: m.sum(axis=1).numpy(),
             lambda: np.sum(mat, axis=1)),
        ]
        gb = n * 4 / 1e9
        print(f"{args.mi} Mi float32 on {args.url}, median of {args.reps}")
        print(f"{'case':<28} {'accel GB/s':>11} {'numpy GB/s':>11} {'accel/numpy':>12}")
        for name, ours, theirs in cases:
            a, b = median_seconds(ours, args.reps), median_seconds(theirs, args.reps)
            print(f"{name:<28} {gb / a:11.2f} {gb / b:11.2f} {b / a:12.2f}")


if __name__ == "__main__":
    main()
