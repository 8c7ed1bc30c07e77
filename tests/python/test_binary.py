"""The element-wise ops of two operands and the Array operators, against numpy in float64 on
fresh random inputs, for each dtype the devices run, with numpy's broadcasting of scalars, rows
and columns; numpy arrays and numbers as operands; numpy.asarray of an Array.

Tolerances: add, subtract, multiply, divide round once in the dtype's arithmetic (float32 for
float16 and bfloat16, then once more to them): |got - ref| <= u |ref|, u = 2^-24 (float32),
2^-53 (float64), then + 2^-11 |ref| (float16) or 2^-8 |ref| (bfloat16); maximum and minimum
exact.
"""
import operator

import numpy as np
import pytest

import accel
from held import held, nn_dtypes, values

U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-24 + 2.0**-11,
     "bfloat16": 2.0**-24 + 2.0**-8}
REF = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
       "maximum": np.maximum, "minimum": np.minimum}


def check(got, ref, op, name):
    tol = 0.0 if op in ("maximum", "minimum") else U[name] * np.abs(ref)
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= tol), (op, name, np.max(np.abs(got - ref) - tol))


def magnitudes(rng, shape):
    """Away from 0 (so quotients are tame), both signs."""
    return rng.uniform(0.5, 4.0, shape) * rng.choice([-1.0, 1.0], shape)


SHAPES = [((5, 7), (5, 7)), ((5, 7), (7,)), ((5, 7), (5, 1)), ((4, 3, 6), (6,)),
          ((4, 3, 6), ()), ((9,), (9,)), ((), ())]


@pytest.mark.parametrize("op", list(REF))
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_matches_numpy(ctx, rng, op, shapes):
    for name in nn_dtypes(ctx):
        a, a64 = held(ctx, magnitudes(rng, shapes[0]), name)
        b, b64 = held(ctx, magnitudes(rng, shapes[1]), name)
        out = getattr(accel, op)(a, b).result()
        assert out.shape == np.broadcast_shapes(a.shape, b.shape)  # bfloat16 bits: 1-d
        assert out.accel_dtype == name
        check(values(out), REF[op](a64, b64), op, name)


@pytest.mark.parametrize("sym,op", [(operator.add, "add"), (operator.sub, "subtract"),
                                    (operator.mul, "multiply"), (operator.truediv, "divide")])
def test_operators_with_arrays_numbers_and_numpy(ctx, rng, sym, op):
    x64, y64 = magnitudes(rng, (6, 5)), magnitudes(rng, (5,))
    x, y = ctx.asarray(x64.astype(np.float32)), ctx.asarray(y64.astype(np.float32))
    xs, ys = x64.astype(np.float32).astype(float), y64.astype(np.float32).astype(float)
    cases = [
        (sym(x, y), REF[op](xs, ys)),                    # Array op Array, a row broadcast
        (sym(x, 2.5), REF[op](xs, 2.5)),                 # Array op number
        (sym(2.5, x), REF[op](2.5, xs)),                 # number op Array (reflected)
        (sym(x, ys.astype(np.float32)), REF[op](xs, ys)),  # Array op numpy
        (sym(ys.astype(np.float32), x), REF[op](ys, xs)),  # numpy op Array (reflected)
    ]
    for got, ref in cases:
        assert isinstance(got, accel.Array)
        check(got.numpy().astype(float), ref, op, "float32")


def test_negation_chains_and_asarray(ctx, rng):
    x64 = magnitudes(rng, (3, 4))
    x = ctx.asarray(x64)
    y = -x * 2.0 + x / 4.0 - 1.0  # each op waits for none: they run in order
    ref = -x64 * 2.0 + x64 / 4.0 - 1.0
    got = np.asarray(y)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    assert np.allclose(got, ref, rtol=1e-15, atol=0)
    assert +x is x


def test_maximum_minimum_propagate_nan(ctx):
    a = ctx.asarray(np.array([1.0, np.nan, 3.0, -4.0], np.float32))
    b = ctx.asarray(np.array([2.0, 2.0, np.nan, -5.0], np.float32))
    hi, lo = accel.maximum(a, b).result().numpy(), accel.minimum(a, b).result().numpy()
    assert np.array_equal(hi, np.maximum(np.asarray(a), np.asarray(b)), equal_nan=True)
    assert np.array_equal(lo, np.minimum(np.asarray(a), np.asarray(b)), equal_nan=True)


def test_refusals_say_why(ctx):
    a = ctx.asarray(np.ones((4, 6), np.float32))
    with pytest.raises(TypeError, match="dtypes differ"):
        a + ctx.asarray(np.ones((4, 6), np.float64))
    with pytest.raises(ValueError):
        a + ctx.asarray(np.ones((5,), np.float32))  # numpy would not broadcast these either
    with pytest.raises(NotImplementedError, match="not supported yet"):
        ctx.asarray(np.ones((2, 3, 4), np.float32)) + ctx.asarray(np.ones((3, 1), np.float32))
    with pytest.raises(TypeError):
        accel.add(1.0, 2.0)


def test_an_operator_refused_at_issue_raises_at_once(ctx):
    """What the checker refuses (uint32 division: numpy's `/` of integers gives floats)
    raises at the operator, with the C library's error; nothing is left pending."""
    u = ctx.asarray(np.arange(6, dtype=np.uint32))
    with pytest.raises(accel.AccelError, match="no divide of u32") as e:
        u / u
    assert e.value.name == "EINVAL"
