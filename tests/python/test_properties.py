"""Property tests (hypothesis) against numpy: over shapes, numpy's broadcasting of scalars,
rows and columns, dtypes and transposed views, for + - * /, the comparisons, where, sum,
astype and matmul with .T.

Hypothesis draws the shapes, dtypes, broadcasts and transposes (and a seed for the values);
every example is checked against float64 (int64 for integers):
  - + - * / maximum: the result within one rounding to the dtype of the float64 answer of the
    values held (|got - ref| <= u |ref|, u = 2^-24, 2^-53, 2^-11; integers exact mod 2^32);
  - comparisons and where: exact;
  - sum: within n e sum|x| + 2 u |ref| (e the accumulator's epsilon, as test_reduce.py);
  - astype: exact against convref.py;
  - matmul: within k 2^-23 (|a| @ |b|) for float32, k 2^-52 for float64.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel
from convref import EVERY, convert, make, same

SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11}
ACC = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-23}
NUMPY = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
         "int32": np.int32, "uint32": np.uint32}

dims = st.integers(1, 9)
forms = st.sampled_from(["full", "row", "column", "scalar"])


def shaped(how, rows, cols):
    return {"full": (rows, cols), "row": (cols,), "column": (rows, 1), "scalar": ()}[how]


def upload(ctx, h, transposed, dev=None):
    """h as an accel array on device `dev`, a transposed view of h.T's buffer where asked and
    2-D."""
    if transposed and h.ndim == 2:
        return ctx.asarray(np.ascontiguousarray(h.T), device=dev).T
    return ctx.asarray(h, device=dev)


def nn_device(ctx, d, name):
    """The d-th (mod their count) device whose nn package runs `name`."""
    devs = [x.index for x in ctx.devices if "nn" in x.packages
            and (name != "float64" or "float64" in x.nn_dtypes)]
    assert devs, f"no device runs {name}"
    return devs[d % len(devs)]


def data(rng, shape, name):
    if name in ("int32", "uint32"):
        return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32) \
            .view(NUMPY[name]).reshape(shape)
    x = rng.uniform(0.25, 8.0, shape) * rng.choice([-1.0, 1.0], shape)
    return np.asarray(x).astype(NUMPY[name])


def float_names(ctx):
    names = set()
    for d in ctx.devices:
        if "nn" in d.packages:
            names |= set(d.nn_dtypes)
    return sorted(names & set(U))


ARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide, "maximum": np.maximum}


@SETTINGS
@given(op=st.sampled_from(sorted(ARITH)), rows=dims, cols=dims, ha=forms, hb=forms,
       ta=st.booleans(), tb=st.booleans(), pick=st.integers(0, 4), seed=st.integers(0, 2**32), d=st.integers(0, 7))
def test_binary_property(ctx, op, rows, cols, ha, hb, ta, tb, pick, seed, d):
    names = float_names(ctx) + ["int32", "uint32"]
    name = names[pick % len(names)]
    if op == "divide" and name in ("int32", "uint32"):
        name = "float32"
    rng = np.random.default_rng(seed)
    ah, bh = data(rng, shaped(ha, rows, cols), name), data(rng, shaped(hb, rows, cols), name)
    dev = nn_device(ctx, d, name)
    a, b = upload(ctx, ah, ta, dev), upload(ctx, bh, tb, dev)
    got = getattr(accel, op)(a, b).result().numpy()
    if name in ("int32", "uint32"):
        with np.errstate(over="ignore"):
            ref = ARITH[op](ah, bh)
        assert got.dtype == ref.dtype and np.array_equal(got, ref)
        return
    ref = ARITH[op](ah.astype(np.float64), bh.astype(np.float64))
    assert got.shape == ref.shape
    assert np.all(np.abs(got.astype(np.float64) - ref) <= U[name] * np.abs(ref)), (op, name)


COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
           "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}


@SETTINGS
@given(op=st.sampled_from(sorted(COMPARE)), rows=dims, cols=dims, ha=forms, hb=forms,
       ta=st.booleans(), tb=st.booleans(), pick=st.integers(0, 4), seed=st.integers(0, 2**32), d=st.integers(0, 7))
def test_compare_property(ctx, op, rows, cols, ha, hb, ta, tb, pick, seed, d):
    names = float_names(ctx) + ["int32", "uint32"]
    name = names[pick % len(names)]
    rng = np.random.default_rng(seed)
    # values from a handful, so that ties are common; NaN in floats
    def few(shape):
        v = rng.integers(0, 4, size=shape).astype(np.float64)
        if name in U:
            v = np.where(rng.random(shape) < 0.1, np.nan, v)
        return np.asarray(v).astype(NUMPY[name])
    ah, bh = few(shaped(ha, rows, cols)), few(shaped(hb, rows, cols))
    dev = nn_device(ctx, d, name)
    got = getattr(accel, op)(upload(ctx, ah, ta, dev), upload(ctx, bh, tb, dev)).result().numpy()
    ref = COMPARE[op](ah, bh)
    assert got.dtype == np.bool_ and np.array_equal(got, ref)


@SETTINGS
@given(rows=dims, cols=dims, hc=forms, ha=forms, hb=forms, tc=st.booleans(),
       ta=st.booleans(), tb=st.booleans(), pick=st.integers(0, 6), seed=st.integers(0, 2**32), d=st.integers(0, 7))
def test_where_property(ctx, rows, cols, hc, ha, hb, tc, ta, tb, pick, seed, d):
    names = float_names(ctx) + ["int32", "uint32", "bool"]
    name = names[pick % len(names)]
    rng = np.random.default_rng(seed)
    ch = rng.random(shaped(hc, rows, cols)) < 0.5
    if name == "bool":
        ah, bh = (rng.random(shaped(h, rows, cols)) < 0.5 for h in (ha, hb))
    else:
        ah, bh = data(rng, shaped(ha, rows, cols), name), data(rng, shaped(hb, rows, cols), name)
    dev = nn_device(ctx, d, name)
    got = accel.where(upload(ctx, np.asarray(ch), tc, dev), upload(ctx, np.asarray(ah), ta, dev),
                      upload(ctx, np.asarray(bh), tb, dev)).result().numpy()
    ref = np.where(ch, ah, bh)
    assert got.shape == ref.shape and np.array_equal(got, ref)


@SETTINGS
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), t=st.booleans(),
       axis=st.sampled_from([None, 0, 1]), pick=st.integers(0, 2), seed=st.integers(0, 2**32), d=st.integers(0, 7))
def test_sum_property(ctx, rows, cols, t, axis, pick, seed, d):
    names = float_names(ctx)
    name = names[pick % len(names)]
    h = data(np.random.default_rng(seed), (rows, cols), name)
    got = upload(ctx, h, t, nn_device(ctx, d, name)).sum(axis=axis).numpy().astype(np.float64)
    x64 = h.astype(np.float64)
    ref = x64.sum(axis=axis)
    n = x64.size if axis is None else x64.shape[axis]
    tol = n * ACC[name] * np.abs(x64).sum(axis=axis) + 2 * U[name] * np.abs(ref)
    assert np.all(np.abs(got - ref) <= tol)


@SETTINGS
@given(rows=dims, cols=dims, t=st.booleans(), src=st.sampled_from(EVERY),
       dst=st.sampled_from(EVERY), seed=st.integers(0, 2**32), d=st.integers(0, 7))
def test_astype_property(ctx, rows, cols, t, src, dst, seed, d):
    if "float64" in (src, dst) and "float64" not in float_names(ctx):
        return  # no device here converts float64 (the pair is refused, tested in C)
    rng = np.random.default_rng(seed)
    x, v = make(ctx, rng, (cols, rows) if t else (rows, cols), src)
    x = x.to(nn_device(ctx, d, "float64" if "float64" in (src, dst) else "float32"))
    if t:
        x, v = x.T, v.T
    got = accel.astype(x, accel.bfloat16 if dst == "bfloat16" else dst)
    assert same(got.numpy(), convert(v, src, dst), dst), (src, dst, t)


@SETTINGS
@given(m=dims, k=dims, n=dims, ta=st.booleans(), tb=st.booleans(),
       name=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**32))
def test_matmul_transpose_property(ctx, m, k, n, ta, tb, name, seed):
    rng = np.random.default_rng(seed)
    ah = rng.uniform(-1, 1, (m, k)).astype(NUMPY[name])
    bh = rng.uniform(-1, 1, (k, n)).astype(NUMPY[name])
    a, b = upload(ctx, ah, ta), upload(ctx, bh, tb)
    # a 1 x 1 transpose reads as row-major: no view
    assert a.is_view == (ta and (m, k) != (1, 1)) and b.is_view == (tb and (k, n) != (1, 1))
    got = (a @ b).numpy().astype(np.float64)
    ref = ah.astype(np.float64) @ bh.astype(np.float64)
    e = 2.0**-23 if name == "float32" else 2.0**-52
    assert np.all(np.abs(got - ref) <= (k + 1) * e * (np.abs(ah) @ np.abs(bh)).astype(float))
