#!/usr/bin/env python3
"""accel — the Python package against the C API, in the same run (docs/PERFORMANCE.md,
"Python").

  tiny  a fill of a 1-element f32 buffer, waited for on its future (Python:
        `accel.fill(a, 1.0).result()`; C: accel_fill + accel_future_wait): median and mean
        microseconds per op. Target: Python / C <= 2.
  bulk  MIB MiB (default 256) of f32 written from ordinary memory (a numpy array; malloc in
        C) into a buffer, copied on the device into a second (so the data goes to the device:
        a GPU where there is one), and read back into another array, waited for. Target:
        rate from Python / rate from C >= 0.9.

Each runs in-process ("embedded:?backends=BACKENDS", default cpu) and through an acceld
started here with the same backends (ipc://); repetitions alternate between C
(bench-python-ref, a separate process) and Python, each opening a fresh context and running
tiny then bulk; the tables give medians over repetitions.

Usage: bench_python.py --ref PATH_TO_bench-python-ref [--acceld PATH] [--backends LIST]
                       [--reps N] [--iters N] [--mib N] [--quick]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import accel


def python_tiny(ctx, iters):
    a = ctx.empty(1, np.float32)
    for _ in range(200):
        accel.fill(a, 1.0).result()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        accel.fill(a, 1.0).result()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6, statistics.fmean(times) * 1e6


def python_bulk(ctx, mib):
    n = mib * (1 << 20) // 4
    src = (np.arange(n, dtype=np.int64) % 1000).astype(np.float32)
    dst = np.empty_like(src)
    a, b = ctx.empty(n, np.float32), ctx.empty(n, np.float32)

    def round_trip():
        t0 = time.perf_counter()
        w = a.write(src)
        c = b.copy_from(a)
        r = b.read(out=dst)
        w.result()
        c.result()
        r.result()
        return time.perf_counter() - t0

    round_trip()  # warm-up: first touch of every page
    s = round_trip()
    if not np.array_equal(src, dst):
        sys.exit("bulk: data read back differs")
    return s


def c_rep(ref, url, iters, mib):
    out = subprocess.run([ref, url, str(iters), str(mib)], capture_output=True, text=True,
                         check=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    return float(fields["tiny_median_us"]), float(fields["tiny_mean_us"]), \
        float(fields["bulk_s"])


def start_daemon(acceld, tmp, backends):
    conf = os.path.join(tmp, "acceld.conf")
    with open(conf, "w") as f:
        f.write(f"[daemon]\nlog_level=error\n[devices]\ncpu_devices=1\nbackends={backends}\n")
    url = f"ipc://{tmp}/acceld.sock"
    proc = subprocess.Popen([acceld, "--config", conf, "--listen", url, "--foreground"])
    for _ in range(3000):
        try:
            accel.open(url).close()
            return proc, url
        except accel.AccelError:
            time.sleep(0.02)
    proc.kill()
    sys.exit("acceld did not start")


def run_mode(name, url, args):
    c, py = [], []
    for _ in range(args.reps):  # each side: a fresh context per repetition, tiny then bulk
        c.append(c_rep(args.ref, url, args.iters, args.mib))
        with accel.open(url) as ctx:
            py.append((*python_tiny(ctx, args.iters), python_bulk(ctx, args.mib)))
    med = [statistics.median(col) for col in zip(*c)]
    pmed = [statistics.median(col) for col in zip(*py)]
    print(f"\n{name} ({url}), {args.reps} repetitions alternating C and Python")
    print(f"  {'measure':<34}{'C':>12}{'Python':>12}{'ratio':>9}  target")
    print(f"  {'tiny op + wait, median (us)':<34}{med[0]:>12.2f}{pmed[0]:>12.2f}"
          f"{pmed[0] / med[0]:>9.2f}  Python/C <= 2")
    print(f"  {'tiny op + wait, mean (us)':<34}{med[1]:>12.2f}{pmed[1]:>12.2f}"
          f"{pmed[1] / med[1]:>9.2f}")
    rate_c, rate_py = 2 * args.mib / 1024 / med[2], 2 * args.mib / 1024 / pmed[2]
    print(f"  {f'{args.mib} MiB write, copy, read (GiB/s)':<34}{rate_c:>12.2f}{rate_py:>12.2f}"
          f"{rate_py / rate_c:>9.2f}  Python/C >= 0.9")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref", required=True)
    p.add_argument("--acceld")
    p.add_argument("--backends", default="cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--quick", action="store_true", help="3 repetitions of 1000 ops")
    args = p.parse_args()
    if args.quick:
        args.reps, args.iters = 3, 1000
    print(f"accel {accel.__version__}, Python {sys.version.split()[0]}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs")
    run_mode("embedded", f"embedded:?backends={args.backends}", args)
    if args.acceld:
        with tempfile.TemporaryDirectory(prefix="accel-bench-py-") as tmp:
            proc, url = start_daemon(args.acceld, tmp, args.backends)
            try:
                run_mode("through acceld", url, args)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)


if __name__ == "__main__":
    main()
