"""User kernels from Python: alkomp's Collatz example, a SAXPY kernel against the built-in op
bit for bit, access modes and ordering, and every bad input as a clear error."""
import os
import subprocess
import sys

import numpy as np
import pytest

import accel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Written as each backend's own axpy is (OpenCL: a product, then a sum; CUDA: one fused
# multiply-add), so the bits match the built-in op's (as examples/saxpy_kernel.c).
SAXPY = {
    "opencl": """#pragma OPENCL FP_CONTRACT OFF
                 __kernel void saxpy(uint n, float a, __global const float *x,
                                      __global float *y) {
                   size_t i = get_global_id(0);
                   if (i < n) { float ax = a * x[i]; y[i] = ax + y[i]; }
                 }""",
    "cuda": """extern "C" __global__ void saxpy(unsigned n, float a, const float *x, float *y) {
                 unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                 if (i < n) y[i] = fmaf(a, x[i], y[i]);
               }""",
}


def test_the_collatz_example_runs(url):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "collatz.py"),
                          url], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "10000 counts, 0 wrong; steps of 27: 111" in run.stdout


def test_saxpy_kernel_matches_the_builtin_and_float64(ctx, rng, kernel_device):
    dev, kind = kernel_device
    n = int(rng.integers(1, 20000))
    x64, y64 = rng.standard_normal(n), rng.standard_normal(n)
    x = ctx.asarray(x64.astype(np.float32), device=dev)
    y = ctx.asarray(y64.astype(np.float32), device=dev)
    y_builtin = ctx.asarray(y64.astype(np.float32), device=dev)
    module = ctx.load_module(SAXPY[kind], kind, device=dev)
    assert module.log() is None or isinstance(module.log(), str)
    f = module["saxpy"]((n + 63) // 64, 64, np.uint32(n), np.float32(0.75), accel.In(x),
                        accel.InOut(y))
    accel.axpy(0.75, x, y_builtin).result()
    assert f.result() is None
    got = y.numpy()
    assert np.array_equal(got, y_builtin.numpy())  # same device, same arithmetic: same bits
    np.testing.assert_allclose(got, 0.75 * x64.astype(np.float32) + y64.astype(np.float32),
                               rtol=1e-6, atol=1e-6)


def test_launches_are_ordered_with_other_ops(ctx, kernel_device):
    dev, kind = kernel_device
    module = ctx.load_module(SAXPY[kind], kind, device=dev)
    x = ctx.empty(1000, device=dev)
    y = ctx.empty(1000, device=dev)
    accel.fill(x, 1.0)
    accel.fill(y, 0.0)
    futures = [module["saxpy"](16, 64, np.uint32(1000), np.float32(1.0), accel.In(x), y)
               for _ in range(10)]
    accel.scal(2.0, y, device=0)  # on another device: after the ten launches
    assert np.array_equal(y.numpy(), np.full(1000, 20.0, np.float32))
    assert accel.gather(futures) == [None] * 10


def test_a_source_that_does_not_build_raises_with_the_log(ctx, kernel_device):
    dev, kind = kernel_device
    module = ctx.load_module("this is not a kernel", kind, device=dev)
    with pytest.raises(accel.AccelError) as e:
        module.log()
    assert e.value.name == "EBUILD"
    assert len(e.value.detail) > len("build of a module:")  # the compiler said why
    with pytest.raises(accel.AccelError):  # a launch from it fails too
        module["k"](1, 1).result()


def test_bad_launches_are_clear_errors(ctx, kernel_device):
    dev, kind = kernel_device
    module = ctx.load_module(SAXPY[kind], kind, device=dev)
    k = module["saxpy"]
    x, y = ctx.empty(64, device=dev), ctx.empty(64, device=dev)
    with pytest.raises(TypeError, match="numpy scalar"):
        k(1, 64, 64, np.float32(1), x, y)  # a Python int has no size
    with pytest.raises(TypeError):
        k(1, 64, np.uint32(64), np.float32(1), np.zeros(64, np.float32), y)
    with pytest.raises(accel.AccelError) as e:
        module["no_such_kernel"](1, 1).result()
    assert e.value.name == "ENOENT"
    with pytest.raises(accel.AccelError) as e:
        k(1, 64, np.uint32(64), np.float32(1), x).result()  # one argument short
    assert e.value.name == "EINVAL"
    with pytest.raises(accel.AccelError) as e:
        k(0, 64, np.uint32(64), np.float32(1), x, y).result()  # an empty grid
    assert e.value.name == "EINVAL"
    with pytest.raises(accel.AccelError) as e:  # the range is past the buffer's end
        k(1, 64, np.uint32(64), np.float32(1), accel.In(x, 10, 64), y).result()
    assert e.value.name == "EINVAL"
    with pytest.raises(ValueError):
        ctx.load_module("x", "fortran")
    module.unload()
    with pytest.raises(accel.AccelError) as e:
        k(1, 64, np.uint32(64), np.float32(1), x, y).result()
    assert e.value.name == "ESTALE"
