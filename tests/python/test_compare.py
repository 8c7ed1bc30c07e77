"""Integer arithmetic, comparisons (bool arrays) and where, against numpy on fresh random
inputs, with numpy's broadcasting of scalars, rows and columns; numbers and numpy arrays as
operands; the bool dtype stored and read back.

Every answer here is exact: int32 and uint32 wrap as numpy's do (random bits, so overflow is
everywhere), comparisons follow IEEE (NaN planted: only != is true), where moves elements as
they are.
"""
import operator

import numpy as np
import pytest

import accel
from held import held, nn_dtypes, values

INTS = [np.int32, np.uint32]
ARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "maximum": np.maximum, "minimum": np.minimum}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
           "less_equal": np.less_equal, "greater": np.greater,
           "greater_equal": np.greater_equal}
SYMBOLS = [(operator.eq, np.equal), (operator.ne, np.not_equal), (operator.lt, np.less),
           (operator.le, np.less_equal), (operator.gt, np.greater),
           (operator.ge, np.greater_equal)]
SHAPES = [((5, 7), (5, 7)), ((5, 7), (7,)), ((5, 7), (5, 1)), ((4, 3, 6), (6,)),
          ((4, 3, 6), ()), ((9,), (9,)), ((), ())]


def int_bits(rng, shape, dtype):
    return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(dtype) \
        if shape else np.array(rng.integers(0, 2**32), np.uint64).astype(np.uint32).view(dtype)


def ties(rng, shape):
    """float64 values from a handful (so that pairs tie), NaN planted."""
    x = rng.integers(-3, 4, size=shape).astype(np.float64) + 0.5 * (rng.random(shape) < 0.2)
    return np.where(rng.random(shape) < 0.1, np.nan, x)


@pytest.mark.parametrize("op", list(ARITH))
@pytest.mark.parametrize("dtype", INTS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_int_arithmetic_wraps_as_numpy(ctx, rng, op, dtype, shapes):
    a64, b64 = int_bits(rng, shapes[0], dtype), int_bits(rng, shapes[1], dtype)
    a, b = ctx.asarray(a64), ctx.asarray(b64)
    out = getattr(accel, op)(a, b).result()
    with np.errstate(over="ignore"):
        ref = ARITH[op](a64, b64)
    assert out.dtype == np.dtype(dtype) and out.shape == ref.shape
    assert np.array_equal(out.numpy(), ref), op


@pytest.mark.parametrize("dtype", INTS, ids=lambda t: np.dtype(t).name)
def test_int_operators_numbers_and_refusals(ctx, rng, dtype):
    x64 = int_bits(rng, (6, 5), dtype)
    x = ctx.asarray(x64)
    with np.errstate(over="ignore"):
        assert np.array_equal((x + 3).numpy(), x64 + dtype(3))
        assert np.array_equal((7 - x).numpy(), dtype(7) - x64)
        assert np.array_equal((x * x).numpy(), x64 * x64)
        assert np.array_equal((-x).numpy(), -x64) if dtype is np.int32 else True
    assert accel.maximum(x, 5).result().dtype == np.dtype(dtype)
    with pytest.raises(accel.AccelError, match="no divide of") as e:
        x / x  # numpy would give float64: the C library says to convert first
    assert e.value.name == "EINVAL"
    with pytest.raises(TypeError, match="numpy would give floats"):
        x + 2.5


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_comparisons_match_numpy(ctx, rng, op, shapes):
    for name in nn_dtypes(ctx):
        a, a64 = held(ctx, ties(rng, shapes[0]), name)
        b, b64 = held(ctx, ties(rng, shapes[1]), name)
        out = getattr(accel, op)(a, b).result()
        assert out.dtype == np.bool_ and out.accel_dtype == "bool"
        ref = COMPARE[op](a64, b64)
        assert out.shape == ref.shape
        assert np.array_equal(out.numpy(), ref), (op, name)
    for dtype in INTS:
        a64 = rng.integers(-3, 4, size=shapes[0]).astype(dtype)
        b64 = rng.integers(-3, 4, size=shapes[1]).astype(dtype)
        out = getattr(accel, op)(ctx.asarray(a64), ctx.asarray(b64)).result()
        assert np.array_equal(out.numpy(), COMPARE[op](a64, b64)), (op, dtype)


@pytest.mark.parametrize("sym,ref", SYMBOLS, ids=lambda s: getattr(s, "__name__", ""))
def test_comparison_operators_with_numbers_numpy_and_nan(ctx, rng, sym, ref):
    x64, y64 = ties(rng, (6, 5)).astype(np.float32), ties(rng, (5,)).astype(np.float32)
    x, y = ctx.asarray(x64), ctx.asarray(y64)
    cases = [(sym(x, y), ref(x64, y64)),            # Array op Array, a row broadcast
             (sym(x, 1.0), ref(x64, np.float32(1))),  # Array op number
             (sym(1.0, x), ref(np.float32(1), x64)),  # number op Array (reflected)
             (sym(x, y64), ref(x64, y64)),           # Array op numpy
             (sym(y64, x), ref(y64, x64)),           # numpy op Array (reflected)
             (sym(x, np.nan), ref(x64, np.float32(np.nan)))]
    for got, want in cases:
        assert isinstance(got, accel.Array) and got.dtype == np.bool_
        assert np.array_equal(got.numpy(), want)


WHERE_SHAPES = [((5, 7), (5, 7), (5, 7)), ((5, 7), (7,), ()), ((5, 1), (5, 7), (7,)),
                ((7,), (5, 1), (5, 7)), ((4, 3, 6), (6,), (4, 3, 6)), ((), (3,), (3,))]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where_matches_numpy(ctx, rng, shapes):
    c64 = rng.random(shapes[0]) < 0.5
    cond = ctx.asarray(np.asarray(c64))
    for dtype in [np.float32, np.float64, np.float16, np.int32, np.uint32, np.bool_]:
        a64 = (rng.random(shapes[1]) * 100 - 50).astype(dtype)
        b64 = (rng.random(shapes[2]) * 100 - 50).astype(dtype)
        out = accel.where(cond, ctx.asarray(a64), ctx.asarray(b64)).result()
        ref = np.where(c64, a64, b64)
        assert out.dtype == ref.dtype and out.shape == ref.shape
        assert np.array_equal(out.numpy(), ref), dtype


def test_where_of_a_comparison_numbers_and_bfloat16(ctx, rng):
    x64 = rng.standard_normal((8, 6)).astype(np.float32)
    x = ctx.asarray(x64)
    relu = accel.where(x > 0, x, 0.0).output  # no waits: each op runs in order
    assert np.array_equal(relu.numpy(), np.where(x64 > 0, x64, np.float32(0)))
    clipped = accel.where(np.array([True, False, True, False, True, False]), -1.0, x).result()
    assert np.array_equal(clipped.numpy(),
                          np.where([True, False, True, False, True, False], np.float32(-1), x64))
    bits = accel.to_bfloat16(x64)
    xb = ctx.asarray(bits, dtype=accel.bfloat16)
    got = accel.where(xb < 0.0, xb, 1.0).result()
    want = np.where(accel.from_bfloat16(bits) < 0, bits, accel.to_bfloat16(np.float32(1)))
    assert np.array_equal(got.numpy(), want)


def test_where_refusals(ctx):
    x = ctx.asarray(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="cond must be a bool array"):
        accel.where(x, x, x)
    with pytest.raises(TypeError, match="a or b must be an accel Array"):
        accel.where(x > 0, 1.0, 2.0)
    with pytest.raises(TypeError, match="dtypes differ"):
        accel.where(x > 0, x, ctx.asarray(np.ones((2, 3), np.float64)))
    with pytest.raises(ValueError):
        accel.where(x > 0, x, ctx.asarray(np.ones((4,), np.float32)))


def test_bool_arrays_store_fill_copy_and_truth(ctx, rng):
    m64 = rng.random((7, 9)) < 0.3
    m = ctx.asarray(m64)
    assert m.accel_dtype == "bool" and m.dtype == np.bool_ and m.nbytes == 63
    assert np.array_equal(m.numpy(), m64)
    assert np.array_equal(ctx.full((4,), True, dtype=bool).numpy(), np.ones(4, bool))
    with pytest.raises(accel.AccelError, match="a bool is 0 or 1"):
        ctx.full((4,), 2, dtype=bool)
    n = ctx.empty((7, 9), dtype=np.bool_)
    n.copy_from(m).result()
    assert np.array_equal(n.numpy(), m64)
    assert bool(ctx.asarray(np.array([1.0], np.float32)) == 1.0)
    assert not bool(ctx.asarray(np.float32(2.0)) < 1.0)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(m)
    with pytest.raises(accel.AccelError):
        m + m  # no arithmetic on bool
    assert {m: 1}[m] == 1  # arrays still hash by identity
