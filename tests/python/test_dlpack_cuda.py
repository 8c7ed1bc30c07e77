"""Zero-copy exchange of CUDA memory with PyTorch and CuPy (DLPack both ways, and
__cuda_array_interface__), checked by device pointer and by writing through one side and
reading through the other. Runs where torch or cupy imports and accel finds a CUDA device;
otherwise each test skips saying which is missing. The context is its own, in the GPUs'
primary contexts (cuda_context=primary), where those libraries allocate.
"""
import gc

import numpy as np
import pytest

import accel

URL = "embedded:?backends=cpu,cuda&cuda_context=primary"


@pytest.fixture(scope="module")
def gpu(through_daemon):
    if through_daemon:
        pytest.skip("zero copy is in-process only")
    with accel.open(URL) as c:
        cuda = [d.index for d in c.devices if d.backend == "cuda"]
        if not cuda:
            pytest.skip("no CUDA device in an embedded context (no GPU or no driver here)")
        yield c, cuda[0]


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def _cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"CuPy sees no CUDA device ({e})")
    return cupy


def test_torch_tensor_into_accel(gpu, rng):
    torch = _torch()
    c, dev = gpu
    host = rng.standard_normal((256, 33)).astype(np.float32)
    t = torch.from_numpy(host).cuda()
    a = accel.from_dlpack(t, ctx=c)
    assert a.device == dev and a.shape == (256, 33)
    assert a.__cuda_array_interface__["data"][0] == t.data_ptr()  # the same memory
    assert np.array_equal(a.numpy(), host)
    accel.multiply(a, 2.0, out=a).result()  # accel writes: torch reads it
    assert np.array_equal(t.cpu().numpy(), host * 2)
    t.fill_(3.0)  # torch writes: accel reads it
    torch.cuda.synchronize()
    assert np.all(a.numpy() == 3.0)


def test_accel_array_into_torch(gpu, rng):
    torch = _torch()
    c, dev = gpu
    host = rng.integers(-1000, 1000, size=(4096,)).astype(np.int32)
    x = c.asarray(host, device=dev)
    t = torch.from_dlpack(x)
    assert t.is_cuda and t.dtype == torch.int32 and t.shape == (4096,)
    t2 = torch.from_dlpack(x)  # a second export: the same pinned copy
    assert t2.data_ptr() == t.data_ptr()
    assert np.array_equal(t.cpu().numpy(), host)
    t.add_(5)  # torch writes: accel reads it
    torch.cuda.synchronize()
    assert np.array_equal(x.numpy(), host + 5)
    x.fill(-1).result()  # accel writes: torch reads it
    assert torch.all(t == -1).item()
    del t, t2
    gc.collect()  # the exports end


def test_cupy_both_ways(gpu, rng):
    cupy = _cupy()
    c, dev = gpu
    host = rng.standard_normal(1000)
    g = cupy.asarray(host)
    a = accel.from_dlpack(g, ctx=c)
    assert a.__cuda_array_interface__["data"][0] == g.data.ptr
    accel.add(a, 1.0, out=a).result()
    assert np.array_equal(cupy.asnumpy(g), host + 1)
    x = c.asarray(host.astype(np.float32), device=dev)
    v = cupy.from_dlpack(x)
    w = cupy.asarray(x)  # through __cuda_array_interface__
    assert v.data.ptr == w.data.ptr
    v *= 4
    cupy.cuda.runtime.deviceSynchronize()
    assert np.array_equal(x.numpy(), host.astype(np.float32) * 4)


def test_own_context_refuses_with_the_reason(through_daemon):
    torch = _torch()
    if through_daemon:
        pytest.skip("in-process only")
    with accel.open("embedded:?backends=cpu,cuda&cuda_context=own") as c:
        cuda = [d.index for d in c.devices if d.backend == "cuda"]
        if not cuda:
            pytest.skip("no CUDA device")
        with pytest.raises(BufferError, match="cuda_context=primary"):
            accel.from_dlpack(torch.zeros(4, device="cuda"), ctx=c)
        with pytest.raises(BufferError, match="cuda_context=primary"):
            torch.from_dlpack(c.zeros(4, device=cuda[0]))
