"""Every op against numpy in float64, on fresh random inputs, for each dtype the devices run.

Tolerances (relative to the size of the terms): float64 1e-12, float32 1e-5, float16 2e-3,
bfloat16 2e-2; gemm's scale with k.
"""
import numpy as np
import pytest

import accel

TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
NUMPY = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
         "bfloat16": accel.bfloat16}


def supported(ctx, package, field):
    """dtype names some device runs: an op on any device is placed only where it runs."""
    return sorted(frozenset().union(*(getattr(d, field) for d in ctx.devices
                                       if package in d.packages)))


def to_device(ctx, x, name):
    """A float64 numpy array as an accel array of dtype `name`, and the values it holds."""
    if name == "bfloat16":
        bits = accel.to_bfloat16(x)
        return ctx.asarray(bits, dtype=accel.bfloat16), accel.from_bfloat16(bits).astype(float)
    held = x.astype(NUMPY[name])
    return ctx.asarray(held), held.astype(np.float64)


def from_device(arr):
    out = arr.numpy()
    if arr.accel_dtype == "bfloat16":
        out = accel.from_bfloat16(out)
    return out.astype(np.float64)


@pytest.mark.parametrize("name", list(TOL))
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (64, 48, 80)])
def test_matmul_matches_numpy(ctx, rng, name, shape):
    if name not in supported(ctx, "blas", "gemm_dtypes"):
        pytest.skip(f"no device runs gemm on {name}")
    m, k, n = shape
    a, a64 = to_device(ctx, rng.standard_normal((m, k)), name)
    b, b64 = to_device(ctx, rng.standard_normal((k, n)), name)
    c = accel.matmul(a, b).result()
    assert c.shape == (m, n) and c.accel_dtype == name
    ref = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    assert np.all(np.abs(from_device(c) - ref) <= TOL[name] * (k + 4) * (scale + 1e-30))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposes_alpha_beta(ctx, rng, ta, tb):
    m, k, n = 6, 4, 5
    a64 = rng.standard_normal((k, m) if ta else (m, k))
    b64 = rng.standard_normal((n, k) if tb else (k, n))
    c64 = rng.standard_normal((m, n))
    a, b = ctx.asarray(a64), ctx.asarray(b64)
    c = ctx.asarray(c64)
    f = accel.matmul(a, b, c, alpha=1.5, beta=-0.5, transpose_a=ta, transpose_b=tb)
    assert f.output is c and f.result() is c
    ref = 1.5 * ((a64.T if ta else a64) @ (b64.T if tb else b64)) - 0.5 * c64
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_batched_matmul_and_a_shared_operand(ctx, rng):
    a64 = rng.standard_normal((3, 4, 5))
    b64 = rng.standard_normal((5, 2))  # shared by the batch (stride 0)
    a, b = ctx.asarray(a64), ctx.asarray(b64)
    c = accel.matmul(a, b).result()
    assert c.shape == (3, 4, 2)
    np.testing.assert_allclose(c.numpy(), a64 @ b64, rtol=1e-12, atol=1e-12)


def test_matmul_in_float32_with_float16_inputs(ctx, rng):
    if "float16" not in supported(ctx, "blas", "gemm_dtypes"):
        pytest.skip("no device runs gemm on float16")
    a, a64 = to_device(ctx, rng.standard_normal((8, 16)), "float16")
    b, b64 = to_device(ctx, rng.standard_normal((16, 4)), "float16")
    c = ctx.empty((8, 4), np.float32)
    accel.matmul(a, b, c).result()
    np.testing.assert_allclose(c.numpy(), a64 @ b64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "bfloat16"])
def test_axpy_dot_scal(ctx, rng, name):
    if name not in supported(ctx, "blas", "vector_dtypes"):
        pytest.skip(f"no device runs the vector ops on {name}")
    n = int(rng.integers(1, 5000))
    x, x64 = to_device(ctx, rng.standard_normal(n), name)
    y, y64 = to_device(ctx, rng.standard_normal(n), name)
    tol = TOL[name]
    d = accel.dot(x, y).result()
    assert abs(d - x64 @ y64) <= tol * (n + 4) * (np.abs(x64) @ np.abs(y64) + 1e-30)
    assert accel.axpy(-2.5, x, y).result() is y
    np.testing.assert_allclose(from_device(y), -2.5 * x64 + y64, rtol=4 * tol, atol=4 * tol)
    accel.scal(3.0, x).result()
    np.testing.assert_allclose(from_device(x), 3.0 * x64, rtol=2 * tol, atol=2 * tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint32])
def test_fill(ctx, rng, dtype):
    value = int(rng.integers(0, 1000))
    a = ctx.full((3, 7), value, dtype)
    assert np.array_equal(a.numpy(), np.full((3, 7), value, dtype))
    accel.fill(a, 5).result()
    assert np.array_equal(a.numpy(), np.full((3, 7), 5, dtype))


@pytest.mark.parametrize("name", list(TOL))
@pytest.mark.parametrize("op", ["sigmoid", "relu", "tanh"])
def test_elementwise(ctx, rng, name, op):
    if name not in supported(ctx, "nn", "nn_dtypes"):
        pytest.skip(f"no device runs the element-wise ops on {name}")
    x, x64 = to_device(ctx, 4 * rng.standard_normal((13, 17)), name)
    y = getattr(accel, op)(x).result()
    ref = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0),
           "tanh": np.tanh}[op](x64)
    tol = max(TOL[name], 1e-6 if name == "float32" else 0)
    np.testing.assert_allclose(from_device(y), ref, rtol=2 * tol, atol=2 * tol)
    in_place = getattr(accel, op)(x, out=x).result()  # dst may be src
    assert in_place is x
    np.testing.assert_allclose(from_device(x), ref, rtol=2 * tol, atol=2 * tol)


@pytest.mark.parametrize("name", list(TOL))
def test_softmax_rows(ctx, rng, name):
    if name not in supported(ctx, "nn", "nn_dtypes"):
        pytest.skip(f"no device runs softmax on {name}")
    x, x64 = to_device(ctx, 10 * rng.standard_normal((9, 33)), name)
    y = accel.softmax(x).result()
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(from_device(y), ref, rtol=4 * TOL[name], atol=4 * TOL[name])


# ---- random numbers: against Philox4x32-10 written here from its definition --------------


def philox4x32_10(ctr, key):
    m0, m1, w0, w1, mask = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF
    x, k0, k1 = list(ctr), key[0], key[1]
    for rnd in range(10):
        if rnd:
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * x[0], m1 * x[2]
        x = [(p1 >> 32) ^ x[1] ^ k0, p1 & mask, (p0 >> 32) ^ x[3] ^ k1, p0 & mask]
    return x


def stream_words(seed, offset, n):
    """Words offset .. offset+n of accel's (and cuRAND's) Philox stream for `seed`."""
    key = (seed & 0xFFFFFFFF, seed >> 32)
    out = []
    for j in range(offset, offset + n):
        q = j // 4
        out.append(philox4x32_10((q & 0xFFFFFFFF, q >> 32, 0, 0), key)[j % 4])
    return np.array(out, dtype=np.uint32)


def test_reference_philox_known_answers():  # Random123's kat_vectors
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C,
                                                   0x9B00DBD8]
    assert philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
                         (0xA4093822, 0x299F31D0)) == [0xD16CFE09, 0x94FDCCEB, 0x5001E420,
                                                       0x24126EA1]


def test_bits_are_the_philox_stream(ctx, rng):
    seed = int(rng.integers(0, 2**63))
    offset = int(rng.integers(0, 1000))
    bits = ctx.bits(257, seed=seed, offset=offset).result()
    assert bits.dtype == np.uint32
    assert np.array_equal(bits.numpy(), stream_words(seed, offset, 257))


def test_uniform_is_curand_uniform_of_the_stream(ctx, rng):
    seed = int(rng.integers(0, 2**63))
    u = ctx.uniform((10, 10), seed=seed, offset=4).result().numpy()
    words = stream_words(seed, 4, 100).astype(np.float32)
    ref = words * np.float32(2.0**-32) + np.float32(2.0**-33)
    assert np.array_equal(u.reshape(-1), ref)
    assert u.min() > 0 and u.max() <= 1


def test_normal_has_the_asked_moments(ctx, rng):
    seed = int(rng.integers(0, 2**63))
    z = ctx.normal(200000, seed=seed, mean=3.0, stddev=2.0).result().numpy().astype(float)
    assert abs(z.mean() - 3.0) < 0.05 and abs(z.std() - 2.0) < 0.05
    again = ctx.normal(200000, seed=seed, mean=3.0, stddev=2.0).result().numpy()
    assert np.array_equal(again, z.astype(np.float32))  # same seed, same numbers


def test_random_fill_into_float64(ctx, rng):
    out = ctx.empty(64, np.float64)
    accel.random_fill(out, "uniform", seed=7).result()
    v = out.numpy()
    assert v.dtype == np.float64 and 0 < v.min() and v.max() < 1 and len(set(v)) == 64
