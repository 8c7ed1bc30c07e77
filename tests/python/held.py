"""Helpers of the element-wise tests (test_binary.py, test_math.py): the dtypes the nn package
runs, and float64 data held in an accel array of a dtype, read back as float64."""
import numpy as np

import accel

NUMPY = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


def nn_dtypes(ctx):
    """The dtype names some device's nn package runs (never none: the test would pass empty)."""
    names = sorted(frozenset().union(*(d.nn_dtypes for d in ctx.devices
                                       if "nn" in d.packages)))
    assert names, "no device runs the nn package"
    return names


def held(ctx, x, name):
    """x (float64) as an accel array of dtype `name`, and the float64 values it holds."""
    if name == "bfloat16":
        bits = accel.to_bfloat16(x)
        return ctx.asarray(bits, dtype=accel.bfloat16), accel.from_bfloat16(bits).astype(float)
    h = np.asarray(x).astype(NUMPY[name])
    return ctx.asarray(h), h.astype(np.float64)


def values(arr):
    """An accel array's contents as float64, in its shape (bfloat16's decoded bits too)."""
    out = arr.numpy()
    got = accel.from_bfloat16(out) if arr.accel_dtype == "bfloat16" else out
    return np.asarray(got).astype(float).reshape(arr.shape)
