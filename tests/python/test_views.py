"""astype between every pair of dtypes, and views without copies (.T, reshape), against numpy
on fresh random inputs.

astype is exact (tests/python/convref.py: an independent rounding in float64 and int64, with
accel's documented answers where numpy's are undefined: floats to integers saturate, NaN
gives 0). A transposed view is read in place by the element-wise ops, comparisons, where,
reductions and astype, and by matmul as gemm's transpose flag; their tolerances are those of
test_binary.py and test_reduce.py (one rounding to the dtype; a sum within n e sum|x|).
"""
import numpy as np
import pytest

import accel
from accel import _ops
from convref import EVERY, convert, make, same, values_of


def devices_with(ctx, name):
    """Devices whose nn package runs `name` (float64 only where the device has it)."""
    devs = [d.index for d in ctx.devices if "nn" in d.packages
            and (name != "float64" or "float64" in d.nn_dtypes)]
    return devs


@pytest.mark.parametrize("dst", EVERY)
@pytest.mark.parametrize("src", EVERY)
def test_astype_every_pair(ctx, rng, src, dst):
    if src == "float64" or dst == "float64":
        devs = devices_with(ctx, "float64")
    else:
        devs = devices_with(ctx, "float32")
    assert devs, "no device runs convert"
    for dev in devs:
        x, v = make(ctx, rng, (13, 17), src)
        x = x.to(dev)
        for view, vals in ((x, v), (x.T, v.T)):
            got = view.astype(accel.bfloat16 if dst == "bfloat16" else dst)
            assert got.accel_dtype == dst and got.shape == vals.shape and not got.is_view
            assert same(got.numpy(), convert(vals, src, dst), dst), (src, dst, dev)


def test_astype_matches_numpy_where_numpy_defines_it(ctx, rng):
    x = rng.uniform(-1e4, 1e4, (40, 30))
    for src in (np.float64, np.float32, np.float16):
        for dst in (np.float64, np.float32, np.float16, np.int32, np.bool_):
            with np.errstate(over="ignore"):
                h = x.astype(src)
            got = accel.astype(ctx.asarray(h), dst).numpy()
            assert got.dtype == np.dtype(dst)
            assert np.array_equal(got, h.astype(dst)), (src, dst)
    i = rng.integers(-2**31, 2**31, (40, 30)).astype(np.int32)
    for dst in (np.uint32, np.float64, np.float32, np.float16, np.bool_):
        with np.errstate(over="ignore"):
            want = i.astype(dst)
        assert np.array_equal(ctx.asarray(i).astype(dst).numpy(), want), dst


def test_astype_copy_rules(ctx, rng):
    x = ctx.asarray(rng.random((4, 5)).astype(np.float32))
    assert x.astype(np.float32, copy=False) is x  # the array API: no copy needed, none made
    c = x.astype(np.float32)  # copy=True: a new buffer
    assert c is not x and c.handle != x.handle
    assert np.array_equal(c.numpy(), x.numpy())
    t = x.T.astype(np.float32, copy=False)  # a view is never returned as the result
    assert not t.is_view and np.array_equal(t.numpy(), x.numpy().T)
    with pytest.raises(TypeError, match="no dtype"):
        x.astype(np.int64)


def test_transpose_is_a_view(ctx, rng):
    h = rng.random((6, 9)).astype(np.float32)
    x = ctx.asarray(h)
    t = x.T
    assert t.is_view and t.shape == (9, 6) and t.handle == x.handle
    assert not t.T.is_view and t.T.handle == x.handle
    assert np.array_equal(t.numpy(), h.T) and np.array_equal(np.asarray(t), h.T)
    assert np.array_equal(t.T.numpy(), h)
    v = ctx.asarray(rng.random(5).astype(np.float32))
    assert v.T is v
    with pytest.raises(NotImplementedError, match="2-D"):
        ctx.asarray(np.zeros((2, 3, 4), np.float32)).T
    out = np.empty((9, 6), np.float32)
    assert t.read(out).result() is out and np.array_equal(out, h.T)


def test_reshape_shares_or_copies(ctx, rng):
    h = rng.random((6, 4)).astype(np.float32)
    x = ctx.asarray(h)
    r = x.reshape(3, 8)
    assert r.handle == x.handle and np.array_equal(r.numpy(), h.reshape(3, 8))
    flat = x.T.reshape(-1)  # numpy copies a transpose it reshapes: so does accel, on device
    assert flat.handle != x.handle and np.array_equal(flat.numpy(), h.T.reshape(-1))
    assert np.array_equal(x.T.reshape(8, 3).numpy(), h.T.reshape(8, 3))


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_matmul_of_views_uses_the_transpose_flag(ctx, rng, ta, tb):
    a = rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    b = rng.uniform(-1, 1, (5, 4) if not tb else (4, 5)).astype(np.float32)
    a_h = a.T.copy() if ta else a
    A, B = ctx.asarray(a_h), ctx.asarray(b)
    va, vb = (A.T if ta else A), (B.T if tb else B)
    base, flag = _ops._untransposed(va, False)
    assert base.handle == A.handle and flag == ta  # the buffer itself, no copy
    got = (va @ vb).numpy()
    ref = va.numpy().astype(np.float64) @ vb.numpy().astype(np.float64)
    tol = 5 * 2.0**-23 * (np.abs(va.numpy()) @ np.abs(vb.numpy()))
    assert np.all(np.abs(got - ref) <= tol)
    # a numpy operand on either side of @ is uploaded
    assert np.all(np.abs((va @ vb.numpy()).numpy() - ref) <= tol)
    assert np.all(np.abs((va.numpy() @ vb).numpy() - ref) <= tol)
    # the flag and the view together: op(va.T) with transpose_a is va again
    got2 = accel.matmul(va.T, vb, transpose_a=True).result().numpy()
    assert np.all(np.abs(got2 - ref) <= tol)


BCAST = ["full", "row", "column", "scalar"]


def operand(ctx, rng, how, rows, cols, transposed):
    """An operand for a rows x cols result: a transposed view where it is 2-D and asked."""
    shape = {"full": (rows, cols), "row": (1, cols), "column": (rows, 1), "scalar": ()}[how]
    h = rng.uniform(0.5, 4.0, shape) * rng.choice([-1.0, 1.0], shape)
    h = h.astype(np.float32)
    if transposed and len(shape) == 2:
        return ctx.asarray(np.ascontiguousarray(h.T)).T, h
    return ctx.asarray(h), h


@pytest.mark.parametrize("hb", BCAST)
@pytest.mark.parametrize("name,fn", [("add", np.add), ("subtract", np.subtract),
                                     ("multiply", np.multiply), ("divide", np.divide),
                                     ("maximum", np.maximum)])
def test_binary_reads_views_in_place(ctx, rng, name, fn, hb):
    x, xh = operand(ctx, rng, "full", 11, 7, True)
    y, yh = operand(ctx, rng, hb, 11, 7, True)
    for a, ah, b, bh in ((x, xh, y, yh), (y, yh, x, xh)):
        got = getattr(accel, name)(a, b).result().numpy()
        ref = fn(ah.astype(np.float64), bh.astype(np.float64))
        assert np.allclose(got, ref, rtol=2.0**-23, atol=0), (name, hb)


def test_compare_where_reduce_astype_of_views(ctx, rng):
    h = rng.integers(-3, 4, (8, 5)).astype(np.float32)
    x = ctx.asarray(h)
    t, th = x.T, h.T
    for op, fn in (("less", np.less), ("equal", np.equal), ("greater_equal", np.greater_equal)):
        assert np.array_equal(getattr(accel, op)(t, 0.0).result().numpy(), fn(th, 0.0))
    col = ctx.asarray(np.ascontiguousarray(th[:, :1].T)).T  # a (5, 1) view
    assert np.array_equal((t > col).numpy(), th > th[:, :1])
    cond = t > 0
    assert np.array_equal(accel.where(cond, t, -t).result().numpy(), np.where(th > 0, th, -th))
    assert np.array_equal(accel.where(x.T > 0, 1.0, t).result().numpy(),
                          np.where(th > 0, 1.0, th))
    for axis in (None, 0, 1):
        assert np.array_equal(t.sum(axis=axis).numpy(), th.sum(axis=axis))
        assert np.array_equal(t.max(axis=axis, keepdims=True).numpy(),
                              th.max(axis=axis, keepdims=True))
    assert np.array_equal(t.astype(np.int32).numpy(), th.astype(np.int32))


def test_ops_that_cannot_take_a_view_copy_or_refuse(ctx, rng):
    h = rng.uniform(-2, 2, (4, 6)).astype(np.float32)
    x = ctx.asarray(h)
    assert np.allclose(accel.sigmoid(x.T).result().numpy(), 1 / (1 + np.exp(-h.T.astype(float))),
                       rtol=1e-6)
    assert np.allclose(accel.softmax(x.T).result().numpy().sum(axis=1), 1.0, rtol=1e-5)
    assert abs(accel.dot(x.T, x.T).result() - float(np.sum(h.astype(float) ** 2))) < 1e-4
    for call in (lambda: accel.add(x, x, out=ctx.empty((4, 6)).reshape(6, 4).T),
                 lambda: accel.relu(x, out=x.T.T.T.T.T.reshape(6, 4).T),
                 lambda: accel.scal(2.0, x.T),
                 lambda: accel.random_fill(x.T, "uniform", seed=1),
                 lambda: x.T.copy_from(x.T)):
        with pytest.raises(ValueError, match="view"):
            call()
    assert np.array_equal(x.numpy(), h)  # nothing was written


def test_write_and_fill_of_a_view(ctx, rng):
    x = ctx.empty((3, 4), np.float32)
    t = x.T
    h = rng.random((4, 3)).astype(np.float32)
    t.write(h).result()
    assert np.array_equal(t.numpy(), h) and np.array_equal(x.numpy(), h.T)
    t.fill(2.5).result()
    assert np.all(x.numpy() == 2.5)


def test_views_of_operator_results_in_a_chain(ctx, rng):
    h = rng.uniform(-2, 2, (5, 3)).astype(np.float32)
    x = ctx.asarray(h)
    y = ((x + 1.0).T * 2.0).T.T  # no waits: each op runs after the one it reads
    assert y.is_view is False and y.shape == (3, 5)
    ref = ((h.astype(np.float64) + 1.0) * 2.0).T
    assert np.allclose(y.numpy(), ref, rtol=2.0**-22, atol=0)
    assert (x + 1.0).T._made_by is not None  # the view keeps its maker's future


def test_no_copy_where_the_op_takes_strides(ctx, rng, monkeypatch):
    """Count the accel_convert calls: none for @, + and sum of views; one for sigmoid."""
    from accel import _lib

    calls = []
    real = _lib.lib.accel_convert

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(_lib.lib, "accel_convert", counting)
    a = ctx.asarray(rng.random((6, 4)).astype(np.float32))
    b = ctx.asarray(rng.random((6, 3)).astype(np.float32))
    got = (a.T @ b).numpy()
    s = (a.T + a.T).sum(axis=0).numpy()
    assert calls == []  # the views went to gemm, binary and reduction as they are
    assert np.allclose(got, a.numpy().T @ b.numpy(), rtol=1e-5)
    assert np.allclose(s, 2 * a.numpy().T.sum(axis=0), rtol=1e-5)
    accel.sigmoid(a.T).result()
    assert len(calls) == 1  # a row-major copy for an op that reads from the start


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (), (0,), (1, 1), (1, 7), (7, 1)])
def test_astype_and_views_of_empty_and_thin_arrays(ctx, rng, shape):
    h = (rng.random(shape) * 10).astype(np.float32)
    a = ctx.asarray(h)
    got = a.astype(np.int32).numpy()
    assert got.shape == shape and np.array_equal(got, h.astype(np.int32))
    if len(shape) == 2:
        assert np.array_equal(a.T.numpy(), h.T)
        assert np.array_equal(a.T.astype(np.float16).numpy(), h.T.astype(np.float16))
        assert np.allclose((a.T + 1.0).numpy(), h.T + 1.0, rtol=2.0**-23)
        ref = h.T.astype(np.float64).sum(axis=1)  # at most 7 terms: within 8 e sum|x|
        assert np.all(np.abs(a.T.sum(axis=1).numpy() - ref) <= 8 * 2.0**-23 * np.abs(ref))


# ---- indexing along the first axis (copies made on the device) ----


@pytest.mark.parametrize("key", [0, 2, -1, -4, slice(1, 3), slice(None, 2), slice(-2, None),
                                 slice(3, 1), slice(-10, 10), slice(None)])
def test_first_axis_indexing_matches_numpy(ctx, rng, key):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    a = ctx.asarray(x)
    got = a[key]
    want = x[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


def test_indexing_a_transposed_view_and_1d(ctx, rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    t = ctx.asarray(x).T  # a view: its rows are x's columns
    np.testing.assert_array_equal(np.asarray(t[1:4]), x.T[1:4])
    np.testing.assert_array_equal(np.asarray(t[-1]), x.T[-1])
    v = ctx.asarray(np.arange(7, dtype=np.int32))
    assert float(v[3]) == 3 and v[3].shape == ()
    np.testing.assert_array_equal(np.asarray(v[2:5]), np.arange(2, 5, dtype=np.int32))


def test_indexing_limits_and_refusals(ctx):
    a = ctx.asarray(np.zeros((4, 2), np.float32))
    a[3], a[-4]  # the last and the first: at the limits
    for bad in (4, -5):  # one past each
        with pytest.raises(IndexError, match="out of bounds for axis 0 with size 4"):
            a[bad]
    with pytest.raises(NotImplementedError, match="step"):
        a[::2]
    with pytest.raises(NotImplementedError, match="first axis only"):
        a[1, 1]
    with pytest.raises(IndexError, match="0-d"):
        accel.sum(a)[0]
    assert a[...] is a
    assert a[2:2].shape == (0, 2)
