"""Arrays: an accel buffer seen with a shape and a numpy dtype.

The buffer lives wherever accel keeps it (the host and the devices that used it, the latest
copy tracked by accel); an Array only adds a shape, a dtype and the device its ops prefer.
Arrays made by reshape() and .T share one buffer, freed when the last of them is collected.
A transposed array is a view: a 2-D shape with (row, col) strides into its buffer, which the
ops read in place (matmul as gemm's transpose flag); see Array.T.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import numpy as np

from . import _dtypes, _lib
from ._errors import check
from ._future import Future

if TYPE_CHECKING:
    from types import EllipsisType

    import numpy.typing as npt

    from ._context import Context
    from ._types import Axis, DType, DeviceLike, NDArray, NumpyDType, Operand, Shape


class _Buffer:
    """Owns one accel buffer handle; destroys it when collected (accel frees it once the ops
    issued on it have completed)."""

    cai: Any  # set once __cuda_array_interface__ exported it (_dlpack.py)

    def __init__(self, ctx: Context, code: int, count: int) -> None:
        out = _lib.handle()
        check(_lib.lib.accel_buffer_create(ctx._live(), code, count, out),
              "accel_buffer_create")
        self.ctx, self.handle, self.code, self.count = ctx, out.value, code, count

    @classmethod
    def wrap(cls, ctx: Context, handle: int, code: int, count: int) -> _Buffer:
        """One over a handle made otherwise (accel_buffer_import)."""
        self = cls.__new__(cls)
        self.ctx, self.handle, self.code, self.count = ctx, handle, code, count
        return self

    def __del__(self) -> None:
        ctx = getattr(self, "ctx", None)
        if ctx is not None and ctx._c and _lib.lib is not None:
            _lib.lib.accel_buffer_destroy(ctx._c, self.handle)


def _shape_of(shape: Shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    dims = tuple(int(s) for s in shape)  # type: ignore[union-attr]  # a sequence by now
    if any(s < 0 for s in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


class Array:
    """A buffer of `size` elements of one dtype, with a shape (row-major, as numpy's).

    Attributes: ctx, shape, dtype (the numpy dtype of numpy() results: uint16 for bfloat16),
    accel_dtype ("float32", ..., "bfloat16"), size, nbytes, ndim, device (an int index, or
    None: ops on this array run where accel places them).
    """

    # numpy's operators and ufuncs hand an Array operand back to its own (ndarray + Array
    # calls Array.__radd__), so the op runs on the device and gives an Array.
    __array_ufunc__ = None

    def __init__(self, ctx: Context, shape: Shape, dtype: DType, device: int | None = None,
                 _buffer: _Buffer | None = None,
                 _strides: tuple[int, int] | None = None) -> None:
        dims = _shape_of(shape)
        # the Future of the op an operator made this array with
        self._made_by: Future[Any] | None = None
        # None: row-major and contiguous from the buffer's start; else a 2-D view, element
        # (r, c) at r * _strides[0] + c * _strides[1] elements (accel_strides)
        self._strides = _strides
        code = _dtypes.code_of(dtype) if _buffer is None else _buffer.code
        size = math.prod(dims)
        self._buf = _buffer if _buffer is not None else _Buffer(ctx, code, max(size, 1))
        self.ctx: Context = ctx
        self.shape: tuple[int, ...] = dims
        self.device: int | None = device
        self._code: int = code

    # ---- description ---------------------------------------------------------------------

    @property
    def handle(self) -> int:
        return self._buf.handle

    @property
    def dtype(self) -> NumpyDType:
        return _dtypes.storage(self._code)

    @property
    def accel_dtype(self) -> str:
        return _dtypes.name(self._code)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d accel array")
        return self.shape[0]

    def __repr__(self) -> str:
        where = "any device" if self.device is None else f"device {self.device}"
        return f"<accel.Array shape={self.shape} dtype={self.accel_dtype} on {where}>"

    @property
    def is_view(self) -> bool:
        """Whether the array reads its buffer at other strides than row-major (a transpose)."""
        return self._strides is not None

    def _like(self, shape: tuple[int, ...], strides: tuple[int, int] | None) -> Array:
        """This buffer seen with another shape (strides None: row-major), the same maker."""
        if strides is not None and len(shape) == 2 and tuple(strides) == (shape[1], 1):
            strides = None  # the transpose of a transpose: row-major again
        view = Array(self.ctx, shape, None, self.device, _buffer=self._buf, _strides=strides)
        view._made_by = self._made_by
        return view

    @property
    def T(self) -> Array:
        """The transpose, as numpy's .T: of a 2-D array a view of the same buffer (no copy;
        ops read it through its strides, matmul as gemm's transpose flag); a 0-d or 1-d array
        itself."""
        if self.ndim < 2:
            return self
        if self.ndim > 2:
            raise NotImplementedError(f".T of a {self.ndim}-d array: accel's views are 2-D "
                                      "(transpose a 2-D array)")
        rs, cs = self._strides if self._strides is not None else (self.shape[1], 1)
        return self._like((self.shape[1], self.shape[0]), (cs, rs))

    def __getitem__(self, key: int | np.integer[Any] | slice | EllipsisType) -> Array:
        """Indexing along the first axis, as numpy's: `a[i]` (negative from the end) and
        `a[i:j]` (step 1, bounds clipped as numpy clips them), and `a[...]`. The result is a
        new array copied on the device (accel_copy of the rows: no host round trip); the
        array API leaves it to the library whether a slice is a view, and accel's ops take
        no offset into a buffer. Other keys (steps, several axes, arrays) are
        NotImplementedError."""
        if key is Ellipsis:
            return self
        if not self.shape:
            raise IndexError("a 0-d accel array takes no index")
        n, row = self.shape[0], math.prod(self.shape[1:])
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise NotImplementedError(f"slices with a step ({key.step}): accel slices "
                                          "the first axis with step 1")
            first, count = start, max(stop - start, 0)
            shape: tuple[int, ...] = (count,)
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
            first, count, shape = i % n, 1, ()
        else:
            raise NotImplementedError(f"index {key!r}: accel indexes the first axis only "
                                      "(an int, or a slice with step 1)")
        shape = shape + tuple(self.shape[1:])
        src = self._plain()
        out = Array(self.ctx, shape, self._code, self.device)
        if count * row > 0:
            cf = _lib.future_p()
            check(_lib.lib.accel_copy(self.ctx._live(), self._dev(None), out.handle, 0,
                                      src.handle, first * row, count * row, cf), "accel_copy")
            out._made_by = Future(cf, "accel_copy", keep=(out._buf, src._buf), output=out)
        return out

    def _plain(self) -> Array:
        """This array if row-major; else a row-major copy made on the device (accel_convert
        to the same dtype), for ops that read a buffer from its start."""
        if self._strides is None:
            return self
        from . import _convert

        return _convert.astype(self, self._code, copy=True)

    def astype(self, dtype: DType, copy: bool = True) -> Array:
        """accel.astype(self, dtype, copy=copy): a new array of `dtype` made on the device."""
        from . import _convert

        return _convert.astype(self, dtype, copy=copy)

    def copy(self) -> Array:
        """A row-major copy made on the device (of a view: its elements in its order)."""
        return self.astype(self._code, copy=True)

    def reshape(self, *shape: Shape) -> Array:
        """The same buffer with another shape of the same size (no copy; one -1 is inferred).
        A view (a transpose) is first copied to row-major on the device, as numpy copies."""
        given: Any = shape
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            given = shape[0]
        dims = tuple(int(s) for s in given)
        if dims.count(-1) == 1:  # one dimension inferred, as numpy does
            known = math.prod(s for s in dims if s != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape {self.shape} into {dims}")
            dims = tuple(self.size // known if s == -1 else s for s in dims)
        dims = _shape_of(dims)
        if math.prod(dims) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {dims}")
        return self._plain()._like(dims, None)

    def to(self, device: DeviceLike) -> Array:
        """The same buffer, with ops on it preferring `device` (no copy now: data moves when
        an op there needs it)."""
        moved = Array(self.ctx, self.shape, None, self.ctx._device_index(device), self._buf,
                      self._strides)
        moved._made_by = self._made_by
        return moved

    def _no_view(self, what: str) -> None:
        """Refuses to write into a view: ops write their outputs row-major from the start."""
        if self._strides is not None:
            raise ValueError(f"{what}: cannot write into a view (a transposed array); write "
                             "into a row-major array (x.copy()) instead")

    # ---- data ----------------------------------------------------------------------------

    def read(self, out: NDArray | None = None) -> Future[NDArray]:
        """Future of a numpy array with this array's contents (into `out` if given: a
        C-contiguous array of this dtype and size, for example one from ctx.host_empty()).
        A view reads its whole buffer and gives its elements in its own order."""
        if self._strides is not None:
            return self._read_view(out)
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif not (isinstance(out, np.ndarray) and out.flags.c_contiguous
                  and out.dtype == self.dtype and out.size == self.size
                  and out.flags.writeable):
            raise ValueError(f"out must be a writeable C-contiguous {self.dtype} array of "
                             f"{self.size} elements")
        cf = _lib.future_p()
        check(_lib.lib.accel_read(self.ctx._live(), self.handle, 0, out.ctypes.data,
                                  self.size, cf), "accel_read")
        return Future(cf, "accel_read", keep=(out, self._buf), output=out)

    def _read_view(self, out: NDArray | None) -> Future[NDArray]:
        """A view is copied to row-major on the device (accel_convert), then read; the
        copy's error, if any, is the read's."""
        plain = self._plain()
        fut = plain.read(out)
        # _plain() of a view converts: that op's Future made the copy
        conv = cast("Future[Array]", plain._made_by)
        fut._finish = lambda _: (conv.result(), fut.output)[1]
        return fut

    def numpy(self, out: NDArray | None = None, timeout: float | None = None) -> NDArray:
        """The contents as a numpy array (waits for the ops issued on it before; raises the
        error of the operator that made it, if it failed)."""
        got = self.read(out).result(timeout)
        if self._made_by is not None:
            self._made_by.result(timeout)  # done: ops on a buffer run in order
        return got

    def __array__(self, dtype: DType | None = None, copy: bool | None = None) -> NDArray:
        """numpy.asarray(array): a copy of the contents, read back from the device."""
        got = self.numpy()
        return got if dtype is None else got.astype(dtype, copy=False)  # type: ignore[arg-type]

    # ---- sharing memory with other libraries (in-process contexts; see _dlpack.py) ----------

    def __dlpack__(self, *, stream: "int | None" = None,
                   max_version: "tuple[int, int] | None" = None,
                   dl_device: "tuple[int, int] | None" = None,
                   copy: "bool | None" = None) -> object:
        """A DLPack capsule over this array's memory, without a copy (numpy.from_dlpack,
        torch.from_dlpack, cupy.from_dlpack take it): on the array's device (its `device`,
        else the first CPU device; `dl_device` picks another), with accel's work on the buffer
        done before it returns (any consumer stream may use it at once). Until the consumer
        lets go, the buffer's copy there is pinned: accel's ops on it run on that device and
        see the consumer's writes. BufferError where memory cannot be shared (through acceld,
        on an OpenCL device, on a CUDA device outside the primary context)."""
        from . import _dlpack

        return _dlpack.dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> "tuple[int, int]":
        """(DLPack device type, id) that __dlpack__() gives: (1, 0) for host memory, (2,
        CUDA ordinal) for a CUDA device."""
        from . import _dlpack

        return _dlpack.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Version 3 of Numba's CUDA array interface for an array on a CUDA device (in the
        primary context), for CuPy, Numba and PyTorch: the buffer stays pinned on that device
        as long as it lives (the interface has no release). AttributeError elsewhere."""
        from . import _dlpack

        return _dlpack.cuda_array_interface(self)

    # ---- operators: element-wise on the device, numpy's broadcasting of scalars, rows and
    # columns; the result is an Array at once (the op runs in order with the others) ----

    def _op(self, name: str, other: object, reflected: bool = False) -> Array:
        from . import _ops

        a, b = (other, self) if reflected else (self, other)
        fut: Future[Array] = getattr(_ops, name)(a, b)
        fut.output._made_by = fut
        return fut.output

    def __add__(self, other: Operand) -> Array:
        return self._op("add", other)

    def __radd__(self, other: Operand) -> Array:
        return self._op("add", other, True)

    def __sub__(self, other: Operand) -> Array:
        return self._op("subtract", other)

    def __rsub__(self, other: Operand) -> Array:
        return self._op("subtract", other, True)

    def __mul__(self, other: Operand) -> Array:
        return self._op("multiply", other)

    def __rmul__(self, other: Operand) -> Array:
        return self._op("multiply", other, True)

    def __truediv__(self, other: Operand) -> Array:
        return self._op("divide", other)

    def __rtruediv__(self, other: Operand) -> Array:
        return self._op("divide", other, True)

    def __matmul__(self, other: Operand) -> Array:
        """accel.matmul(self, other) as an Array at once (a transposed view passes as gemm's
        transpose flag, without a copy); a numpy operand is uploaded in this dtype."""
        return self._op("matmul", self._same_kind(other))

    def __rmatmul__(self, other: Operand) -> Array:
        return self._op("matmul", self._same_kind(other), True)

    def _same_kind(self, other: Operand) -> Array:
        if isinstance(other, Array):
            return other
        return self.ctx.asarray(np.asarray(other, dtype=self.dtype), device=self.device)

    # & | ^ ~ on bool arrays (logical) and int32/uint32 ones (bitwise), on the device
    def __and__(self, other: Operand) -> Array:
        return self._op("bitwise_and", other)

    def __rand__(self, other: Operand) -> Array:
        return self._op("bitwise_and", other, True)

    def __or__(self, other: Operand) -> Array:
        return self._op("bitwise_or", other)

    def __ror__(self, other: Operand) -> Array:
        return self._op("bitwise_or", other, True)

    def __xor__(self, other: Operand) -> Array:
        return self._op("bitwise_xor", other)

    def __rxor__(self, other: Operand) -> Array:
        return self._op("bitwise_xor", other, True)

    def __invert__(self) -> Array:
        from . import _ops

        fut = _ops.invert(self)
        fut.output._made_by = fut
        return fut.output

    def __neg__(self) -> Array:
        return self._op("multiply", -1.0)

    # Comparisons give bool Arrays, as numpy's do (Python reflects them: 2 < x is x > 2). An
    # Array still hashes by identity.
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> Array:  # type: ignore[override]  # numpy's too
        return self._op("equal", other)

    def __ne__(self, other: object) -> Array:  # type: ignore[override]
        return self._op("not_equal", other)

    def __lt__(self, other: Operand) -> Array:
        return self._op("less", other)

    def __le__(self, other: Operand) -> Array:
        return self._op("less_equal", other)

    def __gt__(self, other: Operand) -> Array:
        return self._op("greater", other)

    def __ge__(self, other: Operand) -> Array:
        return self._op("greater_equal", other)

    def __bool__(self) -> bool:
        """The truth of a one-element array (read back), as numpy's; ValueError otherwise."""
        if self.size != 1:
            raise ValueError("the truth value of an accel array of more than one element is "
                             "ambiguous (read it with numpy() and use any() or all())")
        return bool(self.numpy().reshape(-1)[0])

    def __pos__(self) -> Array:
        return self

    def __abs__(self) -> Array:
        from . import _ops

        fut = _ops.abs(self)
        fut.output._made_by = fut
        return fut.output

    # ---- reductions: on the device, an Array at once (0-d for axis=None), as numpy's ----

    def sum(self, axis: Axis = None, keepdims: bool = False) -> Array:
        """accel.sum(self, axis, keepdims)."""
        from . import _reduce

        return _reduce.sum(self, axis, keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> Array:
        """accel.max(self, axis, keepdims)."""
        from . import _reduce

        return _reduce.max(self, axis, keepdims)

    def min(self, axis: Axis = None, keepdims: bool = False) -> Array:
        """accel.min(self, axis, keepdims)."""
        from . import _reduce

        return _reduce.min(self, axis, keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Array:
        """accel.mean(self, axis, keepdims)."""
        from . import _reduce

        return _reduce.mean(self, axis, keepdims)

    def __float__(self) -> float:
        """The value of a one-element array (read back; bfloat16 decoded), as numpy's."""
        if self.size != 1:
            raise TypeError("only one-element arrays can be converted to Python scalars")
        got = self.numpy().reshape(-1)
        return float(_dtypes.from_bfloat16(got)[0] if self._code == _dtypes.BF16 else got[0])

    def write(self, src: npt.ArrayLike) -> Future[Array]:
        """Future of writing `src` (array-like of this size, converted to this dtype) into
        the array. A C-contiguous source of the right dtype is not copied: it must not
        change until the future completes. A view (a transpose) writes src's transpose into
        its buffer."""
        if self._strides is not None:
            src = np.asarray(src, dtype=self.dtype)
            if src.size != self.size:
                raise ValueError(f"source has {src.size} elements, the array {self.size}")
            return self.T.write(src.reshape(self.shape).T)
        src = np.ascontiguousarray(src, dtype=self.dtype)
        if src.size != self.size:
            raise ValueError(f"source has {src.size} elements, the array {self.size}")
        cf = _lib.future_p()
        check(_lib.lib.accel_write(self.ctx._live(), self.handle, 0, src.ctypes.data, self.size,
                                   cf), "accel_write")
        return Future(cf, "accel_write", keep=(src, self._buf), output=self)

    def fill(self, value: SupportsFloat) -> Future[Array]:
        """Future of setting every element to `value` (converted as accel_fill does)."""
        cf = _lib.future_p()
        check(_lib.lib.accel_fill(self.ctx._live(), self._dev(None), self.handle,
                                  float(value), cf), "accel_fill")
        return Future(cf, "accel_fill", keep=(self._buf,), output=self)

    def copy_from(self, src: Array) -> Future[Array]:
        """Future of copying Array `src` (same dtype and size) into this one, on a device (a
        view as src: its elements in its order)."""
        if src._code != self._code or src.size != self.size:
            raise ValueError("copy_from needs an array of the same dtype and size")
        self._no_view("copy_from")
        src = src._plain()
        cf = _lib.future_p()
        check(_lib.lib.accel_copy(self.ctx._live(), self._dev(None), self.handle, 0,
                                  src.handle, 0, self.size, cf), "accel_copy")
        return Future(cf, "accel_copy", keep=(self._buf, src._buf), output=self)

    def _dev(self, device: DeviceLike) -> int:
        """The device index an op on this array runs on: the op's, else the array's."""
        if device is not None:
            return self.ctx._device_index(device)
        return _lib.DEVICE_ANY if self.device is None else self.device
