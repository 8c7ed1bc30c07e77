"""Arrays: numpy in and out for every dtype and shape, reshape, host memory without copies,
bfloat16 conversions, and clear errors for wrong sizes, dtypes and closed contexts."""
import gc

import numpy as np
import pytest

import accel


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.uint32])
@pytest.mark.parametrize("shape", [(1,), (17,), (4, 5), (2, 3, 4)])
def test_round_trip_keeps_values_dtype_and_shape(ctx, rng, dtype, shape):
    x = (rng.standard_normal(shape) * 1000).astype(dtype)
    a = ctx.asarray(x)
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.size == x.size
    assert a.nbytes == x.nbytes and a.ndim == len(shape) and len(a) == shape[0]
    y = a.numpy()
    assert y.dtype == np.dtype(dtype) and y.shape == shape
    assert np.array_equal(y, x)


def test_non_contiguous_and_converted_sources(ctx, rng):
    x = rng.standard_normal((8, 6))
    a = ctx.asarray(x[:, ::2])  # a strided view: written from a contiguous copy
    assert np.array_equal(a.numpy(), x[:, ::2])
    b = ctx.asarray(x, dtype=np.float32)  # converted on the way
    assert b.dtype == np.float32 and np.array_equal(b.numpy(), x.astype(np.float32))
    c = ctx.asarray([[1, 2], [3, 4]], dtype=np.int32)
    assert np.array_equal(c.numpy(), [[1, 2], [3, 4]])


def test_bfloat16_as_uint16_bits(ctx, rng):
    x = rng.standard_normal(100).astype(np.float32)
    x[:3] = [np.nan, np.inf, -0.0]
    bits = accel.to_bfloat16(x)
    assert bits.dtype == np.uint16
    back = accel.from_bfloat16(bits)
    finite = np.isfinite(x)
    assert np.all(np.abs(back[finite] - x[finite]) <= np.abs(x[finite]) * 2.0**-8)
    assert np.isnan(back[0]) and back[1] == np.inf and np.signbit(back[2])
    # round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
    assert accel.to_bfloat16(np.float32(1 + 2.0**-8)) == 0x3F80
    a = ctx.asarray(bits, dtype=accel.bfloat16)
    assert a.accel_dtype == "bfloat16" and a.dtype == np.uint16
    assert np.array_equal(a.numpy(), bits)


def test_reshape_shares_the_buffer(ctx):
    a = ctx.asarray(np.arange(12, dtype=np.float32))
    b = a.reshape(3, 4)
    c = a.reshape((2, -1))
    assert b.handle == a.handle and c.shape == (2, 6)
    accel.scal(2.0, b).result()
    assert np.array_equal(c.numpy(), 2 * np.arange(12, dtype=np.float32).reshape(2, 6))
    del a, b
    gc.collect()
    assert np.array_equal(c.numpy().reshape(-1), 2 * np.arange(12))  # alive through c
    with pytest.raises(ValueError):
        c.reshape(5, 3)


def test_read_into_given_memory_and_host_memory(ctx, rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    a = ctx.asarray(x)
    host = ctx.host_empty((64, 64), np.float32)
    assert host.shape == (64, 64) and host.dtype == np.float32
    assert a.read(out=host).result() is host
    assert np.array_equal(host, x)
    host *= 2
    b = ctx.empty((64, 64))
    b.write(host).result()  # from accel's host memory: no copy here
    assert np.array_equal(b.numpy(), 2 * x)
    with pytest.raises(ValueError):
        a.read(out=np.empty((64, 64), np.float64))
    with pytest.raises(ValueError):
        a.read(out=np.empty((64, 64), np.float32)[:, ::2])


def test_host_memory_outlives_close(url):
    ctx = accel.open(url)
    host = ctx.host_empty(1000, np.float64)
    host[:] = 3.5
    ctx.close()  # the connection stays until the host array goes
    assert host.sum() == 3500.0
    with pytest.raises(accel.AccelError) as e:
        ctx.empty(3)
    assert e.value.name == "ECLOSED"
    del host
    gc.collect()


def test_wrong_sizes_and_dtypes_are_clear_errors(ctx):
    a = ctx.empty(10, np.float32)
    with pytest.raises(ValueError, match="10"):
        a.write(np.zeros(11))
    with pytest.raises(TypeError, match="no dtype"):
        ctx.empty(3, np.int64)
    with pytest.raises(TypeError):
        ctx.empty(3, np.complex64)
    with pytest.raises(ValueError):
        ctx.empty((-1, 2))
    with pytest.raises(ValueError, match="inner dimensions"):
        accel.matmul(ctx.empty((2, 3)), ctx.empty((4, 2)))
    with pytest.raises(ValueError, match="sizes differ"):
        accel.axpy(1.0, ctx.empty(3), ctx.empty(4))


def test_a_bad_device_fails_where_the_array_is_made(ctx):
    n = len(ctx.devices)
    last = ctx.empty(2, device=n - 1)  # the last device: at the limit
    assert last.device == n - 1
    for bad in (n, -1, 10**6):  # one past it, and others
        with pytest.raises(ValueError, match=f"device {bad}: no such device .*has {n}"):
            ctx.empty(2, device=bad)
        with pytest.raises(ValueError, match="no such device"):
            ctx.asarray(np.zeros(2, np.float32), device=bad)
    with pytest.raises(ValueError, match="no such device"):
        last.to(n)


def test_accel_errors_carry_name_and_message(ctx):
    a32, b64 = ctx.empty((2, 2), np.float32), ctx.empty((2, 2), np.float64)
    with pytest.raises(accel.AccelError) as e:
        accel.matmul(a32, b64).result()  # mixed types: accel refuses the call
    assert e.value.name == "EINVAL" and e.value.code == -1
    assert "invalid argument" in str(e.value) and "accel_gemm" in str(e.value)
    with pytest.raises(accel.AccelError) as e:
        accel.fill(ctx.empty(2, np.uint32), -1).result()  # out of u32's range
    assert e.value.name == "EINVAL"


def test_bad_urls(tmp_path):
    with pytest.raises(accel.AccelError) as e:
        accel.open("nonsense://x")
    assert e.value.name == "ENOTSUP"
    with pytest.raises(accel.AccelError) as e:
        accel.open(f"ipc://{tmp_path}/nobody-listens")
    assert e.value.name == "ECLOSED"


def test_arrays_of_a_closed_context_are_refused(url):
    ctx = accel.open(url)
    a = ctx.asarray(np.ones(4, np.float32))
    ctx.close()
    ctx.close()  # twice: nothing
    with pytest.raises(accel.AccelError) as e:
        a.numpy()
    assert e.value.name == "ECLOSED"
    with pytest.raises(accel.AccelError):
        accel.relu(a)
    del a
    gc.collect()  # destroying it after close is harmless


def test_devices_describe_themselves(ctx):
    devs = ctx.devices
    assert devs and [d.index for d in devs] == list(range(len(devs)))
    for d in devs:
        assert d.backend in ("cpu", "cuda", "opencl") and d.state == "serving"
        assert d.mem_bytes > 0 and d.compute_units > 0 and d.name
        assert "float32" in d.nn_dtypes
    assert any("module" in d.packages and d.sources for d in devs)  # builds user kernels


def test_transfer_stats_count_writes_and_reads(ctx):
    before = ctx.transfer_stats()
    a = ctx.asarray(np.zeros(1000, np.float32))
    a.numpy()
    after = ctx.transfer_stats()
    assert after["written"] - before["written"] >= 4000
    assert after["read"] - before["read"] >= 4000


def test_version():
    assert accel.__version__.count(".") == 2
