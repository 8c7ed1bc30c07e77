"""libaccel through ctypes: loading the library and the C declarations it is called with.

Nothing here implements accel: every call goes to libaccel (accel/accel.h), which runs the
runtime in-process or talks to acceld. ctypes releases the GIL for the length of each call, so
a thread waiting on a future (accel_future_wait) never holds up the others.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Iterator

# ---- finding libaccel -----------------------------------------------------------------------


def _candidates() -> Iterator[str]:
    """Where libaccel may be, most specific first."""
    explicit = os.environ.get("ACCEL_LIBRARY")
    if explicit:
        yield explicit
        return
    try:  # written by `meson install` next to this file: the library installed with it
        from . import _paths  # type: ignore[attr-defined]

        yield os.path.join(_paths.LIBDIR, "libaccel.so.0")
    except ImportError:
        pass
    found = ctypes.util.find_library("accel")  # the dynamic linker's cache (ldconfig)
    if found:
        yield found
    yield "libaccel.so.0"  # LD_LIBRARY_PATH and the default directories


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "accel: libaccel not found (install accel, or set ACCEL_LIBRARY to the path of "
        "libaccel.so.0):\n  " + "\n  ".join(errors)
    )


# Any: every accel_* attribute is a foreign function, its result an int, bytes or pointer
# (declared in _PROTOTYPES below); the callers say which.
lib: Any = _load()

# ---- types of accel.h -------------------------------------------------------------------------

ctx_p = ctypes.c_void_p
future_p = ctypes.c_void_p
handle = ctypes.c_uint64  # accel_buffer, accel_module, accel_kernel
device_t = ctypes.c_int32
DEVICE_ANY = -1


class ExportInfo(ctypes.Structure):  # accel_export_info
    _fields_ = [
        ("address", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
    ]


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 96),
        ("backend", ctypes.c_char * 16),
        ("mem_bytes", ctypes.c_uint64),
        ("compute_units", ctypes.c_uint32),
        ("state", ctypes.c_int),
        ("restarts", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
        ("packages", ctypes.c_uint32),
        ("gemm_dtypes", ctypes.c_uint32),
        ("vector_dtypes", ctypes.c_uint32),
        ("rng_dtypes", ctypes.c_uint32),
        ("nn_dtypes", ctypes.c_uint32),
        ("sources", ctypes.c_uint32),
        ("collective_dtypes", ctypes.c_uint32),
    ]


class Rng(ctypes.Structure):
    _fields_ = [
        ("dist", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("mean", ctypes.c_double),
        ("stddev", ctypes.c_double),
    ]


class Arg(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("access", ctypes.c_int),
        ("buffer", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("size", ctypes.c_uint32),
        ("bits", ctypes.c_uint64),
    ]


class LaunchDims(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("shared_bytes", ctypes.c_uint32),
        ("timeout_ms", ctypes.c_uint32),
    ]


class Strides(ctypes.Structure):
    _fields_ = [("row", ctypes.c_size_t), ("col", ctypes.c_size_t)]


class TransferStats(ctypes.Structure):
    _fields_ = [
        ("host_to_device", ctypes.c_uint64),
        ("device_to_host", ctypes.c_uint64),
        ("device_to_device", ctypes.c_uint64),
        ("written", ctypes.c_uint64),
        ("read", ctypes.c_uint64),
    ]


# ---- prototypes -------------------------------------------------------------------------------

_int, _size, _dbl, _flt, _u32, _u64 = (
    ctypes.c_int,
    ctypes.c_size_t,
    ctypes.c_double,
    ctypes.c_float,
    ctypes.c_uint32,
    ctypes.c_uint64,
)
_fut_out = ctypes.POINTER(future_p)
_ptr = ctypes.c_void_p

_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "accel_version": (ctypes.c_char_p, []),
    "accel_strerror": (ctypes.c_char_p, [_int]),
    "accel_err_name": (ctypes.c_char_p, [_int]),
    "accel_last_error_detail": (ctypes.c_char_p, []),
    "accel_open": (_int, [ctypes.POINTER(ctx_p), ctypes.c_char_p]),
    "accel_close": (None, [ctx_p]),
    "accel_device_count": (_int, [ctx_p]),
    "accel_device_info": (_int, [ctx_p, device_t, ctypes.POINTER(DeviceInfo)]),
    "accel_buffer_create": (_int, [ctx_p, _int, _size, ctypes.POINTER(handle)]),
    "accel_buffer_destroy": (_int, [ctx_p, handle]),
    "accel_write": (_int, [ctx_p, handle, _size, _ptr, _size, _fut_out]),
    "accel_read": (_int, [ctx_p, handle, _size, _ptr, _size, _fut_out]),
    "accel_copy": (_int, [ctx_p, device_t, handle, _size, handle, _size, _size, _fut_out]),
    "accel_fill": (_int, [ctx_p, device_t, handle, _dbl, _fut_out]),
    "accel_gemm": (
        _int,
        [ctx_p, device_t, _int, _int, _size, _size, _size, _dbl, handle, _size, handle, _size,
         _dbl, handle, _size, _int, _fut_out],
    ),
    "accel_gemm_strided_batched": (
        _int,
        [ctx_p, device_t, _int, _int, _size, _size, _size, _dbl, handle, _size, _size, handle,
         _size, _size, _dbl, handle, _size, _size, _size, _int, _fut_out],
    ),
    "accel_axpy": (_int, [ctx_p, device_t, _size, _dbl, handle, handle, _fut_out]),
    "accel_dot": (_int, [ctx_p, device_t, _size, handle, handle, handle, _fut_out]),
    "accel_scal": (_int, [ctx_p, device_t, _size, _dbl, handle, _fut_out]),
    "accel_rng_fill": (_int, [ctx_p, device_t, handle, ctypes.POINTER(Rng), _fut_out]),
    "accel_sigmoid": (_int, [ctx_p, device_t, handle, handle, _fut_out]),
    "accel_relu": (_int, [ctx_p, device_t, handle, handle, _fut_out]),
    "accel_tanh": (_int, [ctx_p, device_t, handle, handle, _fut_out]),
    "accel_unary": (_int, [ctx_p, device_t, _int, handle, handle, _fut_out]),
    "accel_softmax": (_int, [ctx_p, device_t, handle, handle, _size, _size, _fut_out]),
    "accel_binary": (
        _int,
        [ctx_p, device_t, _int, handle, _size, _size, handle, Strides, handle, Strides,
         _fut_out],
    ),
    "accel_compare": (
        _int,
        [ctx_p, device_t, _int, handle, _size, _size, handle, Strides, handle, Strides,
         _fut_out],
    ),
    "accel_where": (
        _int,
        [ctx_p, device_t, handle, _size, _size, handle, Strides, handle, Strides, handle,
         Strides, _fut_out],
    ),
    "accel_convert": (
        _int,
        [ctx_p, device_t, handle, _size, _size, handle, Strides, _fut_out],
    ),
    "accel_reduction": (
        _int,
        [ctx_p, device_t, _int, handle, _size, _size, handle, Strides, _int, _fut_out],
    ),
    "accel_all_reduce": (
        _int,
        [ctx_p, ctypes.POINTER(device_t), ctypes.POINTER(handle), ctypes.c_uint32,
         ctypes.c_int, _fut_out],
    ),
    "accel_broadcast": (
        _int,
        [ctx_p, ctypes.POINTER(device_t), ctypes.POINTER(handle), ctypes.c_uint32,
         ctypes.c_uint32, _fut_out],
    ),
    "accel_all_gather": (
        _int,
        [ctx_p, ctypes.POINTER(device_t), ctypes.POINTER(handle), ctypes.POINTER(handle),
         ctypes.c_uint32, _fut_out],
    ),
    "accel_module_load": (
        _int,
        [ctx_p, device_t, _int, ctypes.c_char_p, _size, ctypes.c_char_p, ctypes.POINTER(handle),
         _fut_out],
    ),
    "accel_module_unload": (_int, [ctx_p, handle]),
    "accel_kernel_get": (_int, [ctx_p, handle, ctypes.c_char_p, ctypes.POINTER(handle)]),
    "accel_launch": (
        _int,
        [ctx_p, device_t, handle, ctypes.POINTER(LaunchDims), ctypes.POINTER(Arg), _size,
         _fut_out],
    ),
    "accel_buffer_export": (_int, [ctx_p, handle, device_t, ctypes.POINTER(ExportInfo)]),
    "accel_buffer_export_release": (_int, [ctx_p, handle]),
    "accel_buffer_import": (
        _int,
        [ctx_p, device_t, _u64, _size, _int, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.POINTER(handle)],
    ),
    "accel_finish": (_int, [ctx_p, ctypes.c_int64]),
    "accel_inject_fault": (_int, [ctx_p, device_t]),
    "accel_transfer_stats_get": (_int, [ctx_p, ctypes.POINTER(TransferStats)]),
    "accel_host_alloc": (_int, [ctx_p, _size, ctypes.POINTER(_ptr)]),
    "accel_host_free": (_int, [ctx_p, _ptr]),
    "accel_future_wait": (_int, [future_p, ctypes.c_int64]),
    "accel_future_poll": (_int, [future_p]),
    "accel_future_value": (_ptr, [future_p]),
    "accel_future_retain": (None, [future_p]),
    "accel_future_release": (None, [future_p]),
    "accel_future_notify_fd": (_int, [future_p, _int, _u64]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes

# Error codes used by the package itself (accel/error.h; stable, they travel on the wire).
EINVAL = -1
ETIMEDOUT = -4
EAGAIN = -5
EBUILD = -21
