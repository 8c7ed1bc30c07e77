"""Zero-copy exchange with numpy through DLPack (host memory, the CPU device), checked by
address and by writing through one side and reading through the other; accel's own arrays
both ways; __array__; and, through acceld, the clear refusal (BufferError saying why).
The CUDA half (CuPy, PyTorch) is test_dlpack_cuda.py. Fresh random inputs; exact compares.
"""
import ctypes
import gc

import numpy as np
import pytest

import accel

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint32]


def numpy_takes_bool():
    try:
        np.from_dlpack(np.zeros(1, np.bool_))
        return True
    except (BufferError, TypeError, RuntimeError):
        return False


def data_of(a):
    return a.__array_interface__["data"][0]


def writable(view):
    """A writeable ndarray over the same memory as `view` (numpy before 2.0 makes arrays
    from DLPack read-only): the importer writing through the pointer it was given."""
    raw = (ctypes.c_char * view.nbytes).from_address(data_of(view))
    return np.frombuffer(raw, dtype=view.dtype).reshape(view.shape)


@pytest.fixture
def embedded(through_daemon):
    if through_daemon:
        pytest.skip("zero copy is in-process only (test_refused_through_acceld covers acceld)")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_numpy_views_accel_memory(ctx, rng, embedded, dtype):
    x_np = (rng.standard_normal((37, 11)) * 100).astype(dtype)
    x = ctx.asarray(x_np)
    view = np.from_dlpack(x)
    assert view.dtype == np.dtype(dtype) and view.shape == x_np.shape
    assert np.array_equal(view, x_np)
    # writes through numpy: accel's ops read them (no copy was made)
    writable(view)[3, :] = dtype(7)
    assert np.array_equal(x.numpy()[3], np.full(11, 7, dtype))
    # writes through accel: numpy sees them in place
    x.fill(2).result()
    assert np.all(view == dtype(2))
    addr = data_of(view)
    again = np.from_dlpack(x)  # a second export of the pinned copy: the same memory
    assert data_of(again) == addr
    del view, again
    gc.collect()


def test_transposed_view_exports_with_strides(ctx, rng, embedded):
    x_np = rng.standard_normal((5, 8)).astype(np.float32)
    t = ctx.asarray(x_np).T
    view = np.from_dlpack(t)
    assert view.shape == (8, 5) and np.array_equal(view, x_np.T)


def test_accel_wraps_numpy_memory(ctx, rng, embedded):
    base = rng.standard_normal((64, 9)).astype(np.float32)
    keep = base.copy()
    a = accel.from_dlpack(base, ctx=ctx)
    assert a.shape == base.shape and a.dtype == base.dtype
    assert np.array_equal(a.numpy(), keep)
    assert np.from_dlpack(a).__array_interface__["data"][0] == data_of(base)  # by address
    accel.multiply(a, 3.0, out=a).result()  # accel writes into numpy's memory
    assert np.array_equal(base, keep * 3)
    base[0, 0] = 123.0  # numpy writes: accel reads it
    assert float(a[0][0]) == 123.0


def test_numpy_memory_lives_until_accel_lets_go(ctx, rng, embedded):
    """The imported array holds numpy's array (the capsule's deleter runs when accel frees
    the buffer): the memory outlives the last numpy reference."""
    x_np = rng.standard_normal(1000).astype(np.float64)
    keep = x_np.copy()
    a = accel.from_dlpack(x_np, ctx=ctx)
    del x_np
    gc.collect()
    assert np.array_equal(a.numpy(), keep)
    b = (a + 1.0)
    assert np.array_equal(b.numpy(), keep + 1)


def test_round_trip_through_numpy_and_same_context(ctx, rng, embedded):
    x = ctx.asarray(rng.integers(-5, 5, size=(6, 4)).astype(np.int32))
    assert accel.from_dlpack(x, ctx=ctx) is x  # its own memory already
    view = np.from_dlpack(x)  # numpy's view of accel's memory, imported back: one memory
    back = accel.from_dlpack(writable(view), ctx=ctx)
    assert np.from_dlpack(back).__array_interface__["data"][0] == data_of(view)
    back.fill(9).result()
    assert np.all(x.numpy() == 9)


def test_bool_arrays_and_two_contexts(ctx, url, rng, embedded):
    """Bool masks through DLPack (kDLBool) between two contexts of the process (numpy takes
    bool from 1.25 on: checked too where it does)."""
    m = rng.random((10, 3)) < 0.5
    a = ctx.asarray(m)
    with accel.open(url) as other:
        b = accel.from_dlpack(a, ctx=other)  # another context: through a capsule
        assert b.dtype == np.bool_ and np.array_equal(b.numpy(), m)
        accel.invert(b, out=b).result()  # written by the other context, seen by this one
        assert np.array_equal(a.numpy(), ~m)
        del b
        gc.collect()
    if numpy_takes_bool():
        assert np.array_equal(np.from_dlpack(a), ~m)
        assert np.array_equal(accel.from_dlpack(m, ctx=ctx).numpy(), m)


def test_dlpack_device_and_array(ctx, rng, embedded):
    x_np = rng.standard_normal(7).astype(np.float32)
    x = ctx.asarray(x_np)
    assert tuple(int(v) for v in x.__dlpack_device__()) == (1, 0)
    got = np.asarray(x)  # __array__: a copy read back
    assert isinstance(got, np.ndarray) and np.array_equal(got, x_np)
    assert np.array_equal(np.asarray(x, dtype=np.float64), x_np.astype(np.float64))
    with pytest.raises(AttributeError):
        x.__cuda_array_interface__  # not on a CUDA device


def test_pinned_array_refuses_another_device(url, rng, through_daemon):
    if through_daemon:
        pytest.skip("in-process only")
    with accel.open(url.replace("embedded:?", "embedded:?cpu_devices=2&")
                    if url.startswith("embedded:?") else url) as c:
        cpus = [d.index for d in c.devices if d.backend == "cpu"]
        if len(cpus) < 2:
            pytest.skip("needs two CPU devices")
        x = c.asarray(rng.standard_normal(16).astype(np.float32), device=cpus[0])
        view = np.from_dlpack(x)
        with pytest.raises(accel.AccelError, match="EBUSY"):
            accel.add(x, x, device=cpus[1]).result()
        del view
        gc.collect()  # the export ends: the buffer may move again
        assert np.array_equal(accel.add(x, x, device=cpus[1]).result().numpy(),
                              2 * x.numpy())


def test_refused_through_acceld(ctx, through_daemon):
    x = ctx.asarray(np.arange(4, dtype=np.float32))
    if not through_daemon:
        pytest.skip("the daemon's refusal: run with ACCEL_TEST_ACCELD (suite python-daemon)")
    with pytest.raises(BufferError, match="acceld"):
        np.from_dlpack(x)
    with pytest.raises(BufferError, match="acceld"):
        accel.from_dlpack(np.arange(4, dtype=np.float32), ctx=ctx)
    assert np.array_equal(np.asarray(x), np.arange(4, dtype=np.float32))  # copies still work
