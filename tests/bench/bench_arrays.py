#!/usr/bin/env python3
"""accel — the Python array surface against its peers, in the same run (docs/PERFORMANCE.md,
"Python arrays").

  matmul  a @ b, float32, n x n (default 4096): accel.matmul(a, b, out=c).result() against
          the same gemm called through the C API directly (accel_gemm and accel_future_wait
          by ctypes, no package layer), same buffers, alternating. Target: C time / Python
          time >= 0.95.
  add     z = x + y over MIB MiB of float32 each (default 256): accel.add(x, y, out=z)
          .result() against CuPy's cupy.add(..., out=) and a device synchronize on a GPU
          device, or numpy's np.add(..., out=) on a CPU device. Target: accel's GB/s ÷ the
          peer's >= 0.8.

Medians over --reps repetitions after a warm-up; inputs are random.

Usage: bench_arrays.py [--url URL] [--backend cuda|cpu|opencl] [--n N] [--mib MIB]
                       [--reps R]
"""
import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

import accel
from accel import _lib


def timed(fn, reps):
    fn()  # warm-up
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def bench_matmul(ctx, dev, n, reps):
    rng = np.random.default_rng()
    a = ctx.asarray(rng.standard_normal((n, n), dtype=np.float32), device=dev)
    b = ctx.asarray(rng.standard_normal((n, n), dtype=np.float32), device=dev)
    c = ctx.empty((n, n), np.float32, device=dev)

    def python():
        accel.matmul(a, b, out=c).result()

    def c_api():  # the same call the package makes (row-major as column-major, see _ops.py)
        f = _lib.future_p()
        rc = _lib.lib.accel_gemm(ctx._live(), dev.index, 0, 0, n, n, n, 1.0, b.handle, n,
                                 a.handle, n, 0.0, c.handle, n, 0, ctypes.byref(f))
        if rc != 0:
            raise RuntimeError(f"accel_gemm: {rc}")
        rc = _lib.lib.accel_future_wait(f, -1)
        _lib.lib.accel_future_release(f)
        if rc != 0:
            raise RuntimeError(f"accel_future_wait: {rc}")

    py_s, c_s = [], []
    for _ in range(reps):
        py_s.append(timed(python, 1))
        c_s.append(timed(c_api, 1))
    py, cc = statistics.median(py_s), statistics.median(c_s)
    tflops = 2.0 * n ** 3 / py / 1e12
    print(f"| matmul f32 n={n} | Python {py * 1e3:.3f} ms ({tflops:.1f} TFLOP/s) | "
          f"C API {cc * 1e3:.3f} ms | C / Python {cc / py:.3f} (target >= 0.95) |")


def bench_add(ctx, dev, mib, reps, backend):
    count = mib * (1 << 20) // 4
    rng = np.random.default_rng()
    hx = rng.standard_normal(count, dtype=np.float32)
    hy = rng.standard_normal(count, dtype=np.float32)
    x, y = ctx.asarray(hx, device=dev), ctx.asarray(hy, device=dev)
    z = ctx.empty((count,), np.float32, device=dev)
    ours = timed(lambda: accel.add(x, y, out=z).result(), reps)
    if backend == "cuda":
        import cupy

        cx, cy = cupy.asarray(hx), cupy.asarray(hy)
        cz = cupy.empty_like(cx)

        def peer():
            cupy.add(cx, cy, out=cz)
            cupy.cuda.runtime.deviceSynchronize()

        name = "CuPy"
    else:
        hz = np.empty_like(hx)

        def peer():
            np.add(hx, hy, out=hz)

        name = "numpy"
    theirs = timed(peer, reps)
    check = np.asarray(z)
    if not np.array_equal(check, hx + hy):
        raise RuntimeError("accel.add gave a wrong sum")
    gbs = lambda s: 3 * count * 4 / s / 1e9  # noqa: E731 - two reads and a write
    print(f"| add f32 {mib} MiB | accel {gbs(ours):.1f} GB/s | {name} {gbs(theirs):.1f} GB/s | "
          f"accel / {name} {theirs / ours:.3f} (target >= 0.8) |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--reps", type=int, default=10)
    o = p.parse_args()
    url = o.url or f"embedded:?backends={o.backend}"
    with accel.open(url) as ctx:
        devs = [d for d in ctx.devices if d.backend == o.backend]
        if not devs:
            print(f"bench_arrays: no {o.backend} device at {url}", file=sys.stderr)
            return 1
        dev = devs[0]
        print(f"# bench_arrays: device {dev.index} ({dev.backend}, {dev.name}), "
              f"medians of {o.reps}")
        bench_matmul(ctx, dev, o.n, o.reps)
        bench_add(ctx, dev, o.mib, o.reps, o.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
