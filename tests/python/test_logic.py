"""Logical ops on bool arrays and bitwise ops on int32/uint32 ones (`& | ^ ~`, accel.bitwise_*,
accel.invert), on the device, against numpy on fresh random inputs with numpy's broadcasting
of scalars, rows and columns; every answer is exact. Floats are refused as numpy refuses them.
"""
import operator

import numpy as np
import pytest

import accel

OPS = {"bitwise_and": (operator.and_, np.bitwise_and),
       "bitwise_or": (operator.or_, np.bitwise_or),
       "bitwise_xor": (operator.xor, np.bitwise_xor)}
DTYPES = [np.bool_, np.int32, np.uint32]
SHAPES = [((5, 7), (5, 7)), ((5, 7), (7,)), ((5, 7), (5, 1)), ((4, 3, 6), (6,)),
          ((4, 3, 6), ()), ((9,), (9,)), ((), ())]


def draw(rng, shape, dtype):
    if dtype is np.bool_:
        return rng.random(shape) < 0.5 if shape else np.bool_(rng.random() < 0.5)
    bits = rng.integers(0, 2**32, size=shape or None, dtype=np.uint64).astype(np.uint32)
    return np.asarray(bits).view(dtype)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_logical_ops_match_numpy(ctx, rng, op, dtype, shapes):
    a_np, b_np = np.asarray(draw(rng, shapes[0], dtype)), np.asarray(draw(rng, shapes[1], dtype))
    a, b = ctx.asarray(a_np), ctx.asarray(b_np)
    symbol, ref_fn = OPS[op]
    ref = ref_fn(a_np, b_np)
    by_fn = getattr(accel, op)(a, b).result()
    by_op = symbol(a, b)
    for got in (by_fn, by_op):
        assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
        assert np.array_equal(got.numpy(), ref), op


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_invert_and_mixed_operands(ctx, rng, dtype):
    x_np = np.asarray(draw(rng, (6, 5), dtype))
    y_np = np.asarray(draw(rng, (5,), dtype))
    x = ctx.asarray(x_np)
    assert np.array_equal((~x).numpy(), ~x_np)
    assert np.array_equal(accel.invert(x).result().numpy(), np.invert(x_np))
    assert np.array_equal((x & y_np).numpy(), x_np & y_np)   # a numpy operand, broadcast
    assert np.array_equal((y_np | x).numpy(), y_np | x_np)   # reflected through numpy
    scalar = True if dtype is np.bool_ else dtype(0x0F0F0F0F)
    assert np.array_equal((x ^ scalar).numpy(), x_np ^ scalar)
    assert np.array_equal((scalar & x).numpy(), scalar & x_np)


def test_comparisons_combine(ctx, rng):
    """The use the issue asks for: masks from comparisons combined on the device."""
    v_np = rng.standard_normal((40, 30)).astype(np.float32)
    v = ctx.asarray(v_np)
    mask = ((v > -0.5) & (v < 0.5)) | ~(v != v)  # the last is all true (no NaN)
    band = (v > -0.5) & (v < 0.5) ^ (v > 0)
    assert np.array_equal(mask.numpy(), ((v_np > -0.5) & (v_np < 0.5)) | ~(v_np != v_np))
    assert np.array_equal(band.numpy(), (v_np > -0.5) & (v_np < 0.5) ^ (v_np > 0))
    picked = accel.where((v > 0) & (v < 1), v, 0.0).result()
    assert np.array_equal(picked.numpy(), np.where((v_np > 0) & (v_np < 1), v_np, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda t: np.dtype(t).name)
def test_floats_are_refused(ctx, dtype):
    if dtype is np.float64 and "float64" not in frozenset().union(
            *(d.nn_dtypes for d in ctx.devices)):
        pytest.skip("no device here runs float64")
    x = ctx.asarray(np.ones(4, dtype))
    for symbol in (operator.and_, operator.or_, operator.xor):
        with pytest.raises(TypeError, match="bool and integers"):
            symbol(x, x)
    with pytest.raises(TypeError, match="bool and integers"):
        ~x


def test_c_api_refuses_floats_and_bool_arithmetic(ctx):
    """Below the Python check: accel_binary itself refuses logic of floats and arithmetic of
    bools, with accel_last_error_detail saying why."""
    from accel import _lib
    from accel._errors import check

    f = ctx.asarray(np.ones(4, np.float32))
    b = ctx.asarray(np.ones(4, np.bool_))
    s = _lib.Strides(1, 1)
    for arr, op, words in ((f, 12, "logical ops take bool"), (b, 0, "it takes f32")):
        out = accel.Array(ctx, (4,), arr._code)
        cf = _lib.future_p()
        with pytest.raises(accel.AccelError, match=words):
            check(_lib.lib.accel_binary(ctx._live(), _lib.DEVICE_ANY, op, out.handle, 1, 4,
                                        arr.handle, s, arr.handle, s, cf), "accel_binary")
