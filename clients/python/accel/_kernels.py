"""User kernels: modules built from source, and launches of their kernels over Arrays.

    mod = ctx.load_module(source, "opencl")        # or "cuda", "ptx", "spirv"
    mod.kernel("collatz")(grid, block, np.uint32(n), accel.InOut(v)).result()

A launch is an op like the others: ordered with every op on its arrays, on any device.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _lib
from ._array import Array
from ._errors import check
from ._future import Future

if TYPE_CHECKING:
    from ._context import Context
    from ._types import DeviceLike, Dims

_SOURCES = {"cuda": 1, "ptx": 2, "opencl": 3, "spirv": 4}
_READ, _WRITE, _READ_WRITE = 1, 2, 3
_ARG_BUFFER, _ARG_SCALAR, _ARG_LOCAL = 1, 2, 3


class _Access:
    def __init__(self, array: Array, access: int, offset: int = 0,
                 count: int | None = None) -> None:
        if not isinstance(array, Array):
            raise TypeError(f"expected an accel Array, got {type(array).__name__}")
        self.array, self.access = array, access
        self.offset = int(offset)
        self.count = array.size - self.offset if count is None else int(count)


def In(array: Array, offset: int = 0,  # noqa: N802 - reads like a mode, as in PyOpenCL/CuPy
       count: int | None = None) -> _Access:
    """A kernel argument the kernel only reads (elements offset .. offset+count)."""
    return _Access(array, _READ, offset, count)


def Out(array: Array, offset: int = 0,  # noqa: N802
        count: int | None = None) -> _Access:
    """A kernel argument the kernel writes entirely, without reading it."""
    return _Access(array, _WRITE, offset, count)


def InOut(array: Array, offset: int = 0,  # noqa: N802
          count: int | None = None) -> _Access:
    """A kernel argument the kernel reads and writes (what a bare Array means)."""
    return _Access(array, _READ_WRITE, offset, count)


class local:  # noqa: N801 - a marker, like the dtypes
    """OpenCL: a __local buffer of `nbytes` for the kernel (CUDA: use shared_bytes)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)


def _scalar_bits(value: object) -> tuple[int, int]:
    """(size, bits) of a numpy scalar, by its own dtype."""
    if isinstance(value, (bool, int, float)):
        raise TypeError(
            f"kernel scalar {value!r}: pass a numpy scalar of the kernel's type "
            "(np.int32(n), np.float32(x), ...): a Python number has no size")
    if not isinstance(value, np.generic):
        raise TypeError(f"kernel argument of type {type(value).__name__}: expected an Array, "
                        "In/Out/InOut(array), accel.local(n) or a numpy scalar")
    raw = np.asarray(value).tobytes()
    if len(raw) not in (1, 2, 4, 8):
        raise TypeError(f"kernel scalar {value!r} is {len(raw)} bytes: 1, 2, 4 or 8 only")
    return len(raw), int.from_bytes(raw, "little")


def _arg(value: object, ctx: Context, keep: list[Any]) -> _lib.Arg:
    if isinstance(value, Array):
        value = InOut(value)
    if isinstance(value, _Access):
        if value.array.ctx is not ctx:
            raise ValueError("a kernel argument from another context")
        if value.array._strides is not None:
            raise ValueError("a kernel argument that is a view (a transposed array): a kernel "
                             "reads a buffer from its start; pass x.copy()")
        keep.append(value.array._buf)
        return _lib.Arg(_ARG_BUFFER, value.access, value.array.handle, value.offset,
                        value.count, 0, 0)
    if isinstance(value, local):
        return _lib.Arg(_ARG_LOCAL, 0, 0, 0, 0, value.nbytes, 0)
    size, bits = _scalar_bits(value)
    return _lib.Arg(_ARG_SCALAR, 0, 0, 0, 0, size, bits)


def _dims3(v: Dims, what: str) -> tuple[int, ...]:
    t = (int(v),) if isinstance(v, (int, np.integer)) else tuple(
        int(x) for x in v)  # type: ignore[union-attr]  # a sequence by now
    if not 1 <= len(t) <= 3:
        raise ValueError(f"{what} takes 1 to 3 dimensions")
    return t + (1,) * (3 - len(t))


class Kernel:
    """A kernel of a module, by name. Call it to launch: k(grid, block, *args, ...)."""

    def __init__(self, module: Module, name: str, handle: int) -> None:
        self.module, self.name, self.handle = module, name, handle

    def __repr__(self) -> str:
        return f"<accel.Kernel {self.name}>"

    def __call__(self, grid: Dims, block: Dims, *args: object, shared_bytes: int = 0,
                 timeout_ms: int = 0, device: DeviceLike = None) -> Future[None]:
        """Future of a launch of grid x block threads (CUDA's geometry on every backend:
        OpenCL runs grid*block work items in groups of block). Arguments: Arrays (read and
        written), In/Out/InOut(array, offset, count), numpy scalars (np.float32(2), their
        size is the dtype's), accel.local(nbytes). A kernel still running after timeout_ms
        (0: the device's default) fails with ETIMEDOUT and its device is reset."""
        ctx = self.module.ctx
        keep: list[Any] = [self.module]
        argv = (_lib.Arg * max(len(args), 1))(*[_arg(a, ctx, keep) for a in args])
        dims = _lib.LaunchDims((_lib.ctypes.c_uint32 * 3)(*_dims3(grid, "grid")),
                               (_lib.ctypes.c_uint32 * 3)(*_dims3(block, "block")),
                               int(shared_bytes), int(timeout_ms))
        dev = _lib.DEVICE_ANY if device is None else ctx._device_index(device)
        cf = _lib.future_p()
        check(_lib.lib.accel_launch(ctx._live(), dev, self.handle, _lib.ctypes.byref(dims),
                                    argv, len(args), cf), f"accel_launch {self.name}")
        return Future(cf, f"launch of {self.name}", keep=tuple(keep))


class Module:
    """Code built for one device, or for every device that takes its kind of source.

    Usable at once: launches issued after the load run after the build. `build` is the
    build's Future (its result: the compiler's log, or None; AccelError EBUILD carrying the
    log when the source does not build). Unloaded when collected, or with unload()."""

    def __init__(self, ctx: Context, code: str | bytes, kind: str, options: str | None = None,
                 device: DeviceLike = None) -> None:
        if kind not in _SOURCES:
            raise ValueError(f"source kind must be one of {sorted(_SOURCES)}")
        data = code.encode() if isinstance(code, str) else bytes(code)
        out = _lib.handle()
        cf = _lib.future_p()
        dev = ctx._device_index(device)
        check(_lib.lib.accel_module_load(ctx._live(), dev, _SOURCES[kind], data, len(data),
                                         options.encode() if options else None, out, cf),
              "accel_module_load")
        self.ctx, self.kind = ctx, kind
        self.handle: int | None = out.value
        self.build: Future[str | None] = Future(cf, f"build of a {kind} module",
                                                finish=_build_log)
        self._kernels: dict[str, Kernel] = {}

    def kernel(self, name: str) -> Kernel:
        """The kernel `name` (looked up when it is launched: an unknown name fails the launch
        with ENOENT)."""
        k = self._kernels.get(name)
        if k is None:
            out = _lib.handle()
            check(_lib.lib.accel_kernel_get(self.ctx._live(), self.handle, name.encode(), out),
                  f"accel_kernel_get {name}")
            k = self._kernels[name] = Kernel(self, name, out.value)
        return k

    __getitem__ = kernel

    def log(self, timeout: float | None = None) -> str | None:
        """Waits for the build; the compiler's log (None if it said nothing)."""
        return self.build.result(timeout)

    def unload(self) -> None:
        """Frees the module once the launches issued before have run."""
        h, self.handle = self.handle, None
        if h and self.ctx._c:
            check(_lib.lib.accel_module_unload(self.ctx._c, h), "accel_module_unload")

    def __del__(self) -> None:
        if getattr(self, "handle", None) and _lib.lib is not None:
            try:
                self.unload()
            except Exception:
                pass


def _build_log(cfut: Any) -> str | None:
    value = _lib.lib.accel_future_value(cfut)
    return _lib.ctypes.string_at(value).decode(errors="replace") if value else None
