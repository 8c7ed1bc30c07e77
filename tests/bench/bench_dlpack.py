#!/usr/bin/env python3
"""DLPack exchange of one large array, both ways, against the peer library's own exchange in
the same run (docs/PERFORMANCE.md, "DLPack").

--lib numpy (host memory, the CPU device): np.from_dlpack(accel array) and accel.from_dlpack
(numpy array), baseline np.from_dlpack(numpy array). --lib torch (a CUDA device in the
primary context): torch.from_dlpack(accel array) and accel.from_dlpack(torch tensor),
baseline torch.from_dlpack(torch tensor). Each exchange is timed up to the object in hand and
then let go (its release is timed too: the export's end is a round trip to accel's loop).
Zero copy makes the time independent of the size: run with two sizes to see it. Medians over
repetitions, in microseconds, and the ratio to the baseline.

Usage: bench_dlpack.py [--lib numpy|torch] [--mib N] [--reps N]
"""
import argparse
import gc
import statistics
import time

import numpy as np

import accel


def median_us(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default="numpy", choices=["numpy", "torch"])
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args()
    n = a.mib * (1 << 20) // 4
    gc.disable()  # a collection inside a timed region would be noise
    if a.lib == "numpy":
        url, take, peer = "embedded:?backends=cpu", np.from_dlpack, np.zeros(n, np.float32)
    else:
        import torch

        url, take = "embedded:?backends=cpu,cuda&cuda_context=primary", torch.from_dlpack
        peer = torch.zeros(n, dtype=torch.float32, device="cuda")
    with accel.open(url) as ctx:
        dev = [d.index for d in ctx.devices if d.backend == ("cpu" if a.lib == "numpy"
                                                                else "cuda")][0]
        x = ctx.zeros(n, device=dev)
        export = median_us(lambda: take(x), a.reps)
        imported = median_us(lambda: accel.from_dlpack(peer, ctx=ctx), a.reps)
        base = median_us(lambda: take(peer), a.reps)
    print(f"{a.lib}, {a.mib} MiB float32: export (peer.from_dlpack(accel)) {export:.1f} us, "
          f"import (accel.from_dlpack(peer)) {imported:.1f} us, baseline "
          f"(peer.from_dlpack(peer)) {base:.1f} us; ratios {export / base:.1f}x, "
          f"{imported / base:.1f}x")


if __name__ == "__main__":
    main()
