"""exp, log, sqrt and abs (and abs(Array)) against numpy in float64, on fresh random inputs,
for each dtype the devices run, in place too; log and sqrt give NaN below 0 and log -inf at 0,
as numpy's do.

Tolerances: exp and log a few ulp of the arithmetic (4 u |ref|, u = 2^-24 for float32 and the
16-bit types computed in float32, 2^-53 for float64) plus the rounding to float16 (2^-11
|ref|) or bfloat16 (2^-8 |ref|); sqrt and abs: the one rounding (sqrt) or none (abs).
"""
import numpy as np
import pytest

import accel
from held import held, nn_dtypes, values

ARITH = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-24, "bfloat16": 2.0**-24}
STORE = {"float64": 0.0, "float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}
ULPS = {"exp": 4, "log": 4, "sqrt": 1, "abs": 0}


@pytest.mark.parametrize("fn", list(ULPS))
def test_math_matches_numpy(ctx, rng, fn):
    for name in nn_dtypes(ctx):
        x64 = rng.uniform(0.05, 8.0, 999) * (1 if fn in ("log", "sqrt") else
                                             rng.choice([-1.0, 1.0], 999))
        x, xs = held(ctx, x64, name)
        for in_place in (False, True):
            out = getattr(accel, fn)(x, x if in_place else None).result()
            ref = getattr(np, fn)(xs)
            tol = (ULPS[fn] * ARITH[name] + (STORE[name] if fn != "abs" else 0)) * np.abs(ref)
            got = values(out)
            assert np.all(np.abs(got - ref) <= tol), (fn, name, np.max(np.abs(got - ref) - tol))
            if in_place:
                assert out is x
            else:
                x, xs = held(ctx, x64, name)  # a fresh copy: the next pass writes in place


def test_log_and_sqrt_edges_and_abs_operator(ctx):
    x = ctx.asarray(np.array([-1.0, 0.0, 4.0, -0.0], np.float32))
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(np.array([-1.0, 0.0, 4.0, -0.0], np.float32))  # nan, -inf, log 4, -inf
    assert np.array_equal(accel.log(x).result().numpy(), ref, equal_nan=True)
    assert np.array_equal(accel.sqrt(x).result().numpy(), np.array([np.nan, 0, 2, -0.0],
                                                                       np.float32),
                          equal_nan=True)
    a = abs(x)
    assert isinstance(a, accel.Array)
    assert np.array_equal(a.numpy(), np.array([1, 0, 4, 0], np.float32))
    with pytest.raises(TypeError):
        accel.exp(np.ones(3))
