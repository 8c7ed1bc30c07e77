"""Zero-copy exchange with other array libraries of the process: DLPack (Array.__dlpack__,
Array.__dlpack_device__, from_dlpack) and Array.__cuda_array_interface__, over the C API's
accel_buffer_export / accel_buffer_import.

In-process contexts only (through acceld the memory is in the daemon: BufferError, saying so).
Devices: the CPU backend's (host memory: numpy) and CUDA devices in the primary context
(accel.open("embedded:?cuda_context=primary"): PyTorch, CuPy). Streams: an export waits for
accel's work on the buffer before it returns (the DLPack standard allows it), so the
consumer's stream needs no synchronisation; an import asks the producer to order its work
before the legacy default stream (stream=1), which accel waits for once.
"""
from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dtypes, _lib
from ._errors import AccelError

if TYPE_CHECKING:
    from ._array import Array
    from ._context import Context
    from ._types import DeviceLike

CPU, CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA

# DLDataType (code, bits) of accel's dtypes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLBool 6
_TO_DL = {_dtypes.F32: (2, 32), _dtypes.F64: (2, 64), _dtypes.F16: (2, 16),
          _dtypes.BF16: (4, 16), _dtypes.I32: (0, 32), _dtypes.U32: (1, 32),
          _dtypes.BOOL: (6, 8)}
_FROM_DL = {v: k for k, v in _TO_DL.items()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

# Capsule names live as long as the module (PyCapsule keeps the pointer, not a copy).
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _api))
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_is = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_capsule_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api))

# ---- export -------------------------------------------------------------------------------

# address of a managed tensor we made -> what it keeps alive
_exports: dict[int, tuple[Any, ...]] = {}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(addr: int) -> None:
    """The consumer is done (or the capsule died unconsumed): the export ends."""
    kept = _exports.pop(addr, None)
    if kept is None:
        return
    buf = kept[-1]
    ctx = buf.ctx
    if ctx._c and _lib.lib is not None:
        _lib.lib.accel_buffer_export_release(ctx._c, buf.handle)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_dtor(cap: int) -> None:
    for name in (_NAME, _NAME_V):  # renamed "used_..." once a consumer took it
        if _capsule_valid(cap, name):
            _deleter(_capsule_pointer(cap, name))


def _cuda_ordinal(ctx: Context, index: int) -> int:
    """The CUDA ordinal of accel's device `index` (its place among the context's CUDA
    devices, which accel opens in the driver's order)."""
    return [i for i, b in enumerate(ctx._backends()) if b == "cuda"].index(index)


def _device_for(arr: Array, dl_device: tuple[int, int] | None = None) -> int:
    """accel's device an export of arr goes to: the one dl_device names, else the array's,
    else the first CPU device (host memory)."""
    backends = arr.ctx._backends()
    if dl_device is not None:
        kind, ordinal = int(dl_device[0]), int(dl_device[1])
        want = {CPU: "cpu", CUDA: "cuda"}.get(kind)
        of_kind = [i for i, b in enumerate(backends) if b == want]
        if want is None or not 0 <= ordinal < len(of_kind) or (kind == CPU and ordinal):
            raise BufferError(f"dl_device {tuple(dl_device)}: no such accel device (it shares "
                              "memory of CPU and CUDA devices)")
        return of_kind[ordinal]
    if arr.device is not None:
        return arr.device
    cpus = [i for i, b in enumerate(backends) if b == "cpu"]
    if not cpus:
        raise BufferError("no CPU device in this context to share host memory from")
    return cpus[0]


def dlpack_device(arr: Array) -> tuple[int, int]:
    index = _device_for(arr)
    backend = arr.ctx._backends()[index]
    if backend == "cuda":
        return (CUDA, _cuda_ordinal(arr.ctx, index))
    if backend == "cpu":
        return (CPU, 0)
    raise BufferError(f"device {index} ({backend}): its memory cannot be shared")


def _export(arr: Array, device: int) -> _lib.ExportInfo:
    """accel_buffer_export of arr's buffer on device: its accel_export_info (BufferError with
    the C library's reason if refused)."""
    info = _lib.ExportInfo()
    rc = _lib.lib.accel_buffer_export(arr.ctx._live(), arr.handle, device, ctypes.byref(info))
    if rc < 0:
        why = _lib.lib.accel_last_error_detail().decode(errors="replace")
        raise BufferError(f"accel_buffer_export: {AccelError(rc, why)}")
    return info


def dlpack(arr: Array, stream: int | None = None, max_version: tuple[int, int] | None = None,
           dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> object:
    """Array.__dlpack__: a capsule over the array's own memory (no copy) on its device."""
    if copy:
        arr = arr.copy()
    src = arr
    dl = _TO_DL[src._code]
    device = _device_for(src, dl_device)
    info = _export(src, device)
    ndim = src.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*src.shape)
    strides = None
    if src._strides is not None:
        strides = (ctypes.c_int64 * 2)(*src._strides)
    versioned = max_version is not None and tuple(max_version)[:1] >= (1,)
    m = _DLManagedTensorVersioned() if versioned else _DLManagedTensor()
    if versioned:
        m.version = _DLPackVersion(1, 0)
    t = m.dl_tensor
    t.data = info.address
    t.device = _DLDevice(info.device_type, info.device_id)
    t.ndim = ndim
    t.dtype = _DLDataType(dl[0], dl[1], 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    if strides is not None:
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    m.deleter = ctypes.cast(_deleter, ctypes.c_void_p)
    addr = ctypes.addressof(m)
    _exports[addr] = (m, shape, strides, src._buf)
    return _capsule_new(addr, _NAME_V if versioned else _NAME,
                        ctypes.cast(_capsule_dtor, ctypes.c_void_p))


def cuda_array_interface(arr: Array) -> dict[str, Any]:
    """Array.__cuda_array_interface__ (version 3): the array pinned on its CUDA device for as
    long as its buffer lives (the interface has no release)."""
    index = arr.device
    if index is None or arr.ctx._backends()[index] != "cuda":
        raise AttributeError("__cuda_array_interface__: the array is not on a CUDA device "
                             "(arr.to(cuda_device) first)")
    buf = arr._buf
    if getattr(buf, "cai", None) is None:
        buf.cai = _export(arr, index)  # its export ends when the buffer is destroyed
    size = arr.dtype.itemsize
    strides = None if arr._strides is None else tuple(s * size for s in arr._strides)
    return {"shape": tuple(arr.shape), "typestr": arr.dtype.str, "data": (buf.cai.address, False),
            "version": 3, "strides": strides, "stream": None}


# ---- import -------------------------------------------------------------------------------

def _take(capsule: object) -> tuple[int, Any, int]:
    """The managed tensor in a DLPack capsule (either version), the capsule marked used: its
    deleter is ours to call now. (pointer, tensor, flags)."""
    for name, used, kind in ((_NAME_V, _USED_V, _DLManagedTensorVersioned),
                             (_NAME, _USED, _DLManagedTensor)):
        if _capsule_is(capsule, name):
            ptr = _capsule_get(capsule, name)
            _capsule_rename(capsule, used)
            m = kind.from_address(ptr)
            return ptr, m, getattr(m, "flags", 0)
    raise BufferError("not a DLPack capsule (or one consumed already)")


def _give_back(ptr: int, m: Any) -> None:
    if m.deleter:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(m.deleter)(ptr)


def from_dlpack(ctx: Context, x: Any, device: DeviceLike = None,
                copy: bool | None = None) -> Array:
    """An accel Array over the memory of `x` (any object with __dlpack__: a numpy array, a
    PyTorch or CuPy tensor), without a copy; see accel.from_dlpack."""
    from ._array import Array

    if isinstance(x, Array) and x.ctx is ctx:  # its own memory already
        return x.copy() if copy else x
    if copy:
        return ctx.asarray(np.from_dlpack(x), device=device)
    kind, ordinal = x.__dlpack_device__()
    kind, ordinal = int(kind), int(ordinal)
    backend = {CPU: "cpu", CUDA: "cuda"}.get(kind)
    of_kind = [i for i, b in enumerate(ctx._backends()) if b == backend]
    if backend is None or not 0 <= ordinal < len(of_kind):
        raise BufferError(f"from_dlpack: memory of DLPack device ({kind}, {ordinal}) has no "
                          "accel device here (CPU and CUDA devices share memory)")
    index = of_kind[ordinal] if device is None else ctx._device_index(device)
    stream = 1 if kind == CUDA else None  # the producer orders its work before stream 1
    try:
        capsule = x.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer before DLPack 1.0
        capsule = x.__dlpack__(stream=stream)
    ptr, m, flags = _take(capsule)
    try:
        return _wrap(ctx, index, ptr, m, flags)
    except BaseException:
        _give_back(ptr, m)
        raise


def _wrap(ctx: Context, index: int, ptr: int, m: Any, flags: int) -> Array:
    from ._array import Array, _Buffer

    t = m.dl_tensor
    key = (t.dtype.code, t.dtype.bits)
    if key not in _FROM_DL or t.dtype.lanes != 1:
        raise BufferError(f"from_dlpack: DLPack dtype {key} (lanes {t.dtype.lanes}) is none of "
                          "accel's")
    code = _FROM_DL[key]
    shape = tuple(t.shape[i] for i in range(t.ndim))
    size = _dtypes.storage(code).itemsize
    if t.strides:
        want = [1] * t.ndim
        for i in range(t.ndim - 2, -1, -1):
            want[i] = want[i + 1] * shape[i + 1]
        if any(t.strides[i] != want[i] and shape[i] != 1 for i in range(t.ndim)):
            raise BufferError("from_dlpack: accel shares C-contiguous tensors only (make it "
                              "contiguous first)")
    count = math.prod(shape)
    if count == 0:
        _give_back(ptr, m)
        return Array(ctx, shape, code, index)
    h = _lib.handle()  # the producer's deleter is the release: called on accel's loop thread
    rc = _lib.lib.accel_buffer_import(ctx._live(), index, t.data + t.byte_offset, count * size,
                                      code, m.deleter, ptr, ctypes.byref(h))
    if rc < 0:
        why = _lib.lib.accel_last_error_detail().decode(errors="replace")
        raise BufferError(f"accel_buffer_import: {AccelError(rc, why)}")
    buf = _Buffer.wrap(ctx, h.value, code, count)
    arr = Array(ctx, shape, None, index, _buffer=buf)
    if flags & _READ_ONLY:  # not ours to write: a copy, and the producer's memory let go
        arr = arr.copy()
    return arr
