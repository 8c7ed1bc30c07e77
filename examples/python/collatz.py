#!/usr/bin/env python3
"""collatz: alkomp's Python Collatz example, written for accel.

For every element, a user kernel counts the steps of the Collatz sequence until it reaches 1,
on a device (OpenCL C, or CUDA C where a CUDA device is there and no OpenCL device); each
count is checked on the host. Exit status 0 only if every count is right.

    python3 collatz.py                                   # in-process
    python3 collatz.py ipc:///run/acceld/acceld.sock     # through the daemon
"""
import sys

import numpy as np

import accel

OPENCL_C = """
__kernel void collatz(uint n, __global uint *v) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  uint x = v[i], steps = 0;
  for (; x > 1; steps++) x = (x % 2) ? 3 * x + 1 : x / 2;
  v[i] = steps;
}
"""

CUDA_C = """
extern "C" __global__ void collatz(unsigned n, unsigned *v) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = v[i], steps = 0;
  for (; x > 1; steps++) x = (x % 2) ? 3 * x + 1 : x / 2;
  v[i] = steps;
}
"""


def host_steps(x):
    steps = 0
    while x > 1:
        x = 3 * x + 1 if x % 2 else x // 2
        steps += 1
    return steps


def main(url=None):
    with accel.open(url) as ctx:
        dev, kind = next(((d, k) for k in ("opencl", "cuda") for d in ctx.devices
                          if k in d.sources), (None, None))
        if dev is None:
            print("no device here builds user kernels (OpenCL or CUDA)", file=sys.stderr)
            return 1
        numbers = np.arange(1, 10001, dtype=np.uint32)
        v = ctx.asarray(numbers)
        module = ctx.load_module(OPENCL_C if kind == "opencl" else CUDA_C, kind, device=dev)
        block = 64
        grid = (len(numbers) + block - 1) // block
        module.kernel("collatz")(grid, block, np.uint32(len(numbers)), accel.InOut(v)).result()
        steps = v.numpy()
        wrong = [int(x) for x, s in zip(numbers, steps) if host_steps(int(x)) != s]
        print(f"collatz on {dev.name} ({kind}): {len(numbers)} counts, {len(wrong)} wrong; "
              f"steps of 27: {steps[26]}")
        return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
