#!/usr/bin/env python3
"""accel's astype (accel_convert) against numpy's, in the same run (docs/PERFORMANCE.md,
"Conversions").

For N elements (default 16 Mi) already in an accel buffer: x.astype(dtype), waited for (one
accel_convert, nothing read back), and the row-major copy of a transposed view
(x.T.astype(same dtype), numpy's np.ascontiguousarray(h.T)); numpy's astype on the same data
in this process. Medians over repetitions, as GB/s of input read plus output written, and
the ratio accel / numpy (above 1: accel is faster).

Usage: bench_convert.py [--url URL] [--mi N] [--reps N]   (default embedded:?backends=cpu)
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


def converted(x, dtype):
    out = x.astype(dtype)
    out._made_by.result()  # the convert itself: nothing read back
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="embedded:?backends=cpu")
    p.add_argument("--mi", type=int, default=16)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    n = args.mi << 20
    rows = 1 << ((n.bit_length() - 1) // 2)
    rng = np.random.default_rng(1)
    f32 = (rng.random(n, dtype=np.float32) - 0.5) * 1e4
    data = {np.float32: f32, np.float64: f32.astype(np.float64),
            np.int32: f32.astype(np.int32)}
    with accel.open(args.url) as ctx:
        held = {t: ctx.asarray(h) for t, h in data.items()}
        cases = [(f"{np.dtype(s).name} -> {np.dtype(d).name}", s, d)
                 for s, d in ((np.float32, np.float16), (np.float32, np.int32),
                              (np.int32, np.float32), (np.float64, np.float32),
                              (np.float32, np.float64))]
        print(f"{args.mi} Mi elements on {args.url}, median of {args.reps}")
        print(f"{'case':<30} {'accel GB/s':>11} {'numpy GB/s':>11} {'accel/numpy':>12}")
        for name, s, d in cases:
            gb = n * (np.dtype(s).itemsize + np.dtype(d).itemsize) / 1e9
            a = median_seconds(lambda: converted(held[s], d), args.reps)
            b = median_seconds(lambda: data[s].astype(d), args.reps)
            print(f"{name:<30} {gb / a:11.2f} {gb / b:11.2f} {b / a:12.2f}")
        m, mh = held[np.float32].reshape(rows, n // rows), f32.reshape(rows, n // rows)
        gb = n * 8 / 1e9
        a = median_seconds(lambda: converted(m.T, np.float32), args.reps)
        b = median_seconds(lambda: np.ascontiguousarray(mh.T), args.reps)
        name = f"float32 .T copy {rows}x{n // rows}"
        print(f"{name:<30} {gb / a:11.2f} {gb / b:11.2f} {b / a:12.2f}")


if __name__ == "__main__":
    main()
