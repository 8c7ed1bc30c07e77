"""sum, max, min and mean (accel.* and the Array methods) against numpy in float64 on fresh
random inputs, for each dtype and each device that runs the nn package: every axis of 1-D, 2-D
and 3-D arrays (first and last), keepdims, NaN, empty arrays, and the refusals.

Tolerances: max and min exact (they pick an element). A sum of n elements within
n * e * sum|x| of the float64 sum of the values held (e = 2^-23, the float32 accumulator of
float32, float16 and bfloat16; 2^-52 for float64), plus the rounding to the dtype (2 u |ref|:
u = 2^-24, 2^-53, 2^-11, 2^-8); a mean the same over n.
"""
import numpy as np
import pytest

import accel
from held import held, nn_dtypes, values

ACC = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-23, "bfloat16": 2.0**-23}
U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
REF = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}


def nn_devices(ctx):
    devs = [d.index for d in ctx.devices if "nn" in d.packages]
    assert devs, "no device runs the nn package"
    return devs


def check(got, x64, op, name, axis, keepdims=False):
    ref = REF[op](x64, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(ref), (op, axis, got.shape, np.shape(ref))
    if op in ("max", "min"):
        assert np.array_equal(got, ref, equal_nan=True), (op, name, axis)
        return
    n = x64.size if axis is None else x64.shape[axis]
    mag = np.sum(np.abs(x64), axis=axis, keepdims=keepdims)
    tol = n * ACC[name] * mag / (n if op == "mean" and n else 1) + 2 * U[name] * np.abs(ref)
    ok = (np.abs(got - ref) <= tol) | (np.isnan(got) & np.isnan(ref))
    assert np.all(ok), (op, name, axis, np.max(np.abs(got - ref) - tol))


CASES = [((37,), None), ((37,), 0), ((37,), -1), ((23, 41), None), ((23, 41), 0),
         ((23, 41), 1), ((23, 41), -2), ((5, 6, 7), None), ((5, 6, 7), 0), ((5, 6, 7), 2),
         ((1, 300), 0), ((300, 1), 1), ((), None)]


@pytest.mark.parametrize("op", list(REF))
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_reductions_match_numpy(ctx, rng, op, shape, axis):
    for dev in nn_devices(ctx):
        for name in nn_dtypes(ctx):
            x, x64 = held(ctx, rng.uniform(0.5, 4.0, shape) * rng.choice([-1.0, 1.0], shape),
                          name)
            x = x.reshape(shape).to(dev)  # bfloat16 bits: held() gives them 1-d
            got = getattr(accel, op)(x, axis=axis)
            assert isinstance(got, accel.Array) and got.accel_dtype == name
            check(values(got), x64.reshape(shape), op, name, axis)


@pytest.mark.parametrize("op", list(REF))
def test_methods_keepdims_and_float(ctx, rng, op):
    x64 = rng.standard_normal((8, 5))
    x = ctx.asarray(x64)
    for axis in (None, 0, 1):
        got = getattr(x, op)(axis=axis, keepdims=True)
        check(got.numpy(), x64, op, "float64", axis, keepdims=True)
    whole = getattr(x, op)()
    assert whole.shape == () and whole.ndim == 0  # a 0-d Array, where numpy gives a scalar
    assert abs(float(whole) - float(REF[op](x64))) <= 1e-12 * np.sum(np.abs(x64))


@pytest.mark.parametrize("op", list(REF))
def test_nan_propagates(ctx, rng, op):
    for dev in nn_devices(ctx):
        x64 = rng.uniform(-3, 3, (6, 9))
        x64[2, 4] = np.nan
        x = ctx.asarray(x64.astype(np.float32)).to(dev)
        x32 = x64.astype(np.float32).astype(float)
        for axis in (None, 0, 1):
            check(getattr(accel, op)(x, axis=axis).numpy().astype(float), x32, op, "float32",
                  axis)


def test_empty_arrays(ctx):
    e = ctx.asarray(np.zeros((0, 4), np.float32))
    assert float(accel.sum(e)) == 0.0
    assert np.array_equal(e.sum(axis=0).numpy(), np.zeros(4, np.float32))
    assert np.isnan(float(e.mean()))
    assert e.max(axis=1).shape == (0,)  # no output: nothing to refuse, as numpy
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        e.max()
    with pytest.raises(ValueError, match="minimum which has no identity"):
        accel.min(e, axis=0)


def test_refusals(ctx):
    x = ctx.asarray(np.ones((2, 3, 4), np.float32))
    with pytest.raises(NotImplementedError, match="first axis, the last"):
        x.sum(axis=1)
    with pytest.raises(np.exceptions.AxisError if hasattr(np, "exceptions") else np.AxisError):
        x.sum(axis=3)
    with pytest.raises(TypeError, match="accel Array"):
        accel.sum(np.ones(3))
    u = ctx.asarray(np.arange(6, dtype=np.uint32))
    with pytest.raises(accel.AccelError, match="needs a float dtype, not u32"):
        u.sum()  # integer sums are not on the device yet
    assert float(x.sum(axis=(0, 1, 2))) == 24.0  # every axis is the whole array


def test_chains_run_in_order(ctx, rng):
    """A reduction reads what the op before it wrote, without a wait between them."""
    x64 = rng.uniform(1, 2, (16, 32))
    x = ctx.asarray(x64.astype(np.float32))
    y = (x * 2.0 - 1.0).sum(axis=1)
    ref = np.sum(x64.astype(np.float32).astype(float) * 2.0 - 1.0, axis=1)
    assert np.allclose(y.numpy(), ref, rtol=32 * 2.0**-23, atol=0)
