"""The ops: BLAS, element-wise, softmax and random fills, as functions over Arrays.

Every op returns a Future at once; its result (and its `output`, available at once) is the
output Array, or a number for dot(). Ops on the same arrays run in the order they were issued,
whatever the device, so outputs can be passed to the next op without waiting.
"""
from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Callable, Iterable, Sequence, SupportsFloat, TypeVar,
                    cast)

import numpy as np

from . import _dtypes, _lib
from ._array import Array
from ._errors import check
from ._future import Future

if TYPE_CHECKING:
    from ._context import Context
    from ._types import DeviceLike, NDArray, Operand

T = TypeVar("T")

_MATH = {None: 0, "default": 0, "fp32": 1, "tf32": 2, "fp64": 3}
_DIST = {"bits": 0, "uniform": 1, "normal": 2}


def _same_ctx(*arrays: Array) -> Context:
    ctx = arrays[0].ctx
    for a in arrays[1:]:
        if a.ctx is not ctx:
            raise ValueError("arrays of different contexts")
    return ctx


def _issue(name: str, call: Callable[[Any], Any], keep: Iterable[Array], output: T
           ) -> Future[T]:
    """Runs an accel_* call that takes a future last; the Future of its op."""
    cf = _lib.future_p()
    check(call(cf), name)
    return Future(cf, name, keep=tuple(a._buf for a in keep), output=output)


def _out_like(x: Array, out: Array | None, shape: tuple[int, ...] | None = None,
              dtype_code: int | None = None) -> Array:
    shape = x.shape if shape is None else shape
    if out is None:
        return Array(x.ctx, shape, x._code if dtype_code is None else dtype_code, x.device)
    out._no_view("out")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {out.shape}, expected {shape}")
    return out


# ---- BLAS ---------------------------------------------------------------------------------


def _untransposed(x: Array, flag: bool) -> tuple[Array, bool]:
    """(array, transpose flag) for gemm: a transposed view is its row-major base with the
    flag flipped (no copy); any other view a row-major copy."""
    if x._strides is None:
        return x, flag
    base = x.T
    if base._strides is None:
        return base, not flag
    return x._plain(), flag


def matmul(a: Array, b: Array, out: Array | None = None, *, alpha: SupportsFloat = 1.0,
           beta: SupportsFloat = 0.0, transpose_a: bool = False, transpose_b: bool = False,
           math: str | None = None, device: DeviceLike = None) -> Future[Array]:
    """out = alpha * op(a) @ op(b) + beta * out, numpy's row-major layout (op(x) is x.T with
    transpose_x). 2-D arrays, or stacks (batch, rows, cols) where a 2-D operand is shared by
    every matrix of the batch. Types: float64, float32, float16, bfloat16 (a and b alike);
    out the same, or float32 for float16/bfloat16 inputs. math: None, "fp32", "tf32", "fp64"
    (accel_math). accel's BLAS is column-major: a row-major C = A B is computed as the
    column-major C^T = B^T A^T, which reads the same memory without moving it. A transposed
    view (x.T) goes to gemm as its buffer with the transpose flag flipped: no copy."""
    ctx = _same_ctx(a, b, *([out] if out is not None else []))
    a, transpose_a = _untransposed(a, transpose_a)
    b, transpose_b = _untransposed(b, transpose_b)
    if a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise ValueError("matmul takes 2-D arrays or stacks of them (3-D)")
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    for x in (a, b):
        if x.ndim == 3 and x.shape[0] != batch:
            raise ValueError(f"batch sizes differ: {a.shape} and {b.shape}")
    ar, ac = a.shape[-2:]
    br, bc = b.shape[-2:]
    m, k = (ac, ar) if transpose_a else (ar, ac)
    kb, n = (bc, br) if transpose_b else (br, bc)
    if k != kb:
        raise ValueError(f"matmul: inner dimensions differ ({m}x{k} and {kb}x{n})")
    stacked = a.ndim == 3 or b.ndim == 3
    shape: tuple[int, ...] = (batch, m, n) if stacked else (m, n)
    dst = _out_like(a, out, shape)
    dev = a._dev(device)
    if math not in _MATH:
        raise ValueError(f"math must be one of {sorted(k for k in _MATH if k)} or None")
    lda, ldb = (bc, ac)  # the row lengths: the column-major leading dimensions
    ta, tb = int(bool(transpose_b)), int(bool(transpose_a))
    if not stacked:
        return _issue("accel_gemm", lambda f: _lib.lib.accel_gemm(
            ctx._live(), dev, ta, tb, n, m, k, alpha, b.handle, lda, a.handle, ldb, beta,
            dst.handle, n, _MATH[math], f), (a, b, dst), dst)
    stride_b = br * bc if b.ndim == 3 else 0
    stride_a = ar * ac if a.ndim == 3 else 0
    return _issue("accel_gemm_strided_batched", lambda f: _lib.lib.accel_gemm_strided_batched(
        ctx._live(), dev, ta, tb, n, m, k, alpha, b.handle, lda, stride_b, a.handle, ldb,
        stride_a, beta, dst.handle, n, m * n, batch, _MATH[math], f), (a, b, dst), dst)


def axpy(alpha: SupportsFloat, x: Array, y: Array, *, device: DeviceLike = None) -> Future[Array]:
    """y = alpha * x + y over every element (x and y of one size and float dtype)."""
    ctx = _same_ctx(x, y)
    y._no_view("axpy")
    x = x._plain()
    if x.size != y.size:
        raise ValueError(f"axpy: sizes differ ({x.size} and {y.size})")
    dev = y._dev(device)
    return _issue("accel_axpy", lambda f: _lib.lib.accel_axpy(
        ctx._live(), dev, x.size, float(alpha), x.handle, y.handle, f), (x, y), y)


def scal(alpha: SupportsFloat, x: Array, *, device: DeviceLike = None) -> Future[Array]:
    """x = alpha * x."""
    x._no_view("scal")
    dev = x._dev(device)
    return _issue("accel_scal", lambda f: _lib.lib.accel_scal(
        x.ctx._live(), dev, x.size, float(alpha), x.handle, f), (x,), x)


def _as_float(arr: NDArray, code: int) -> float:
    if code == _dtypes.BF16:
        return float(_dtypes.from_bfloat16(arr)[0])
    return float(arr[0])


def dot(x: Array, y: Array, *, device: DeviceLike = None) -> Future[float]:
    """Future of the dot product x . y (a Python float) over every element."""
    ctx = _same_ctx(x, y)
    x, y = x._plain(), y._plain()
    if x.size != y.size:
        raise ValueError(f"dot: sizes differ ({x.size} and {y.size})")
    result = _out_like(x, None, (1,))
    dev = x._dev(device)
    op = _issue("accel_dot", lambda f: _lib.lib.accel_dot(
        ctx._live(), dev, x.size, x.handle, y.handle, result.handle, f), (x, y, result), None)
    host = np.empty(1, result.dtype)
    cf = _lib.future_p()
    check(_lib.lib.accel_read(ctx._live(), result.handle, 0, host.ctypes.data, 1, cf),
          "accel_read")

    def finish(_: object) -> float:
        op.result()  # the dot's own error, if any, before the value read after it
        return _as_float(host, x._code)

    return Future(cf, "accel_dot", keep=(host, result._buf, op), finish=finish)


def fill(x: Array, value: SupportsFloat, *, device: DeviceLike = None) -> Future[Array]:
    """Every element of x = value."""
    dev = x._dev(device)
    return _issue("accel_fill", lambda f: _lib.lib.accel_fill(
        x.ctx._live(), dev, x.handle, float(value), f), (x,), x)


# ---- NN element-wise --------------------------------------------------------------------------


def _elementwise(name: str, fn: Callable[..., Any], x: Array, out: Array | None,
                 device: DeviceLike) -> Future[Array]:
    x = x._plain()
    dst = _out_like(x, out)
    _same_ctx(x, dst)
    dev = x._dev(device)
    return _issue(name, lambda f: fn(x.ctx._live(), dev, dst.handle, x.handle, f), (x, dst),
                  dst)


def sigmoid(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = 1 / (1 + exp(-x)), element-wise (a new array unless out is given; out may be x)."""
    return _elementwise("accel_sigmoid", _lib.lib.accel_sigmoid, x, out, device)


def relu(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = max(x, 0), element-wise."""
    return _elementwise("accel_relu", _lib.lib.accel_relu, x, out, device)


def tanh(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = tanh(x), element-wise."""
    return _elementwise("accel_tanh", _lib.lib.accel_tanh, x, out, device)


_UNARY = {"exp": 3, "log": 4, "sqrt": 5, "abs": 6}


def _unary(name: str, x: Array, out: Array | None, device: DeviceLike) -> Future[Array]:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: x must be an accel Array (got {type(x).__name__})")
    return _elementwise("accel_unary", lambda c, d, o, s, f: _lib.lib.accel_unary(
        c, d, _UNARY[name], o, s, f), x, out, device)


def exp(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = e**x, element-wise (the nn package's dtypes; out may be x)."""
    return _unary("exp", x, out, device)


def log(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = the natural logarithm of x, element-wise: NaN below 0, -inf at 0."""
    return _unary("log", x, out, device)


def sqrt(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = the square root of x, element-wise (correctly rounded): NaN below 0."""
    return _unary("sqrt", x, out, device)


def abs(x: Array, out: Array | None = None, *,  # noqa: A001 - numpy's name
        device: DeviceLike = None) -> Future[Array]:
    """out = |x|, element-wise."""
    return _unary("abs", x, out, device)


def softmax(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """Softmax of each row (the last axis) of x, numerically stable; a 1-D x is one row."""
    x = x._plain()
    dst = _out_like(x, out)
    _same_ctx(x, dst)
    cols = x.shape[-1] if x.ndim else 1
    rows = x.size // cols if cols else 0
    dev = x._dev(device)
    return _issue("accel_softmax", lambda f: _lib.lib.accel_softmax(
        x.ctx._live(), dev, dst.handle, x.handle, rows, cols, f), (x, dst), dst)


# ---- random fills -------------------------------------------------------------------------


def random_fill(out: Array, dist: str, *, seed: int, offset: int = 0,
                mean: SupportsFloat = 0.0, stddev: SupportsFloat = 1.0,
                device: DeviceLike = None) -> Future[Array]:
    """Fills `out` from accel's Philox4x32-10 stream (accel_rng_fill): dist "bits" (uint32),
    "uniform" (in (0, 1]) or "normal" (mean, stddev; offset even). The same (seed, offset,
    size) gives the same numbers on every device and through every API, C's included."""
    if dist not in _DIST:
        raise ValueError(f"dist must be one of {sorted(_DIST)}")
    out._no_view("random_fill")
    spec = _lib.Rng(_DIST[dist], int(seed), int(offset), float(mean), float(stddev))
    dev = out._dev(device)
    return _issue("accel_rng_fill", lambda f: _lib.lib.accel_rng_fill(
        out.ctx._live(), dev, out.handle, _lib.ctypes.byref(spec), f), (out,), out)


# ---- element-wise of two operands, broadcast as numpy does -------------------------------

_BINARY = {"add": 0, "subtract": 1, "multiply": 2, "divide": 3, "maximum": 4, "minimum": 5,
           "bitwise_and": 12, "bitwise_or": 13, "bitwise_xor": 14}
_LOGICAL = frozenset(("bitwise_and", "bitwise_or", "bitwise_xor"))


def _operand(x: Operand, like: Array) -> Array:
    """x as an Array beside `like`: an Array as it is; a number, a 1-element array of like's
    dtype (filled on the device, in order); anything numpy takes, uploaded in like's dtype."""
    if isinstance(x, Array):
        return x
    if isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)) or np.ndim(x) == 0:
        number: Any = x  # a number, or a 0-d array: float() and int() take it
        if like._code in _dtypes.INTEGERS and float(number) != int(number):
            raise TypeError(f"{x!r} with an {like.accel_dtype} array: numpy would give floats, "
                            "accel keeps the array's dtype (convert the array to a float dtype "
                            "first)")
        a = Array(like.ctx, (), like._code, like.device)
        fill(a, float(number))
        return a
    return like.ctx.asarray(np.asarray(x, dtype=like.dtype), device=like.device)


def _read_as(x: Array, out_shape: tuple[int, ...], rows: int, cols: int
             ) -> tuple[Array, _lib.Strides]:
    """(x, its accel_strides) to read x as `out_shape` seen as rows x cols: a view (a
    transpose) in place where the result is 2-D, else x's row-major copy (accel_convert)."""
    if x._strides is not None and len(out_shape) <= 2:
        rs, cs = x._strides
        shape = (1,) * (len(out_shape) - 2) + tuple(x.shape)
        full = tuple(out_shape) if len(out_shape) == 2 else (1,) + tuple(out_shape)
        if shape == full:
            return x, _lib.Strides(rs, cs)
        if shape == (1, 1):
            return x, _lib.Strides(0, 0)
        if shape[0] == 1 and shape[1] == full[1]:
            return x, _lib.Strides(0, cs)
        if shape[1] == 1 and shape[0] == full[0]:
            return x, _lib.Strides(rs, 0)
    x = x._plain()
    return x, _lib.Strides(*_strides_in(x.shape, out_shape, rows, cols))


def _strides_in(shape: tuple[int, ...], out_shape: tuple[int, ...], rows: int, cols: int
                ) -> tuple[int, int]:
    """How an operand of `shape` is read to make `out_shape` seen as rows x cols: its (row,
    col) strides, numpy's broadcasting in the forms accel_binary takes."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    lead, last = shape[:-1], shape[-1] if shape else 1
    out_lead, out_last = out_shape[:-1], out_shape[-1] if out_shape else 1
    if shape == tuple(out_shape):
        return (cols, 1)
    if all(s == 1 for s in shape):
        return (0, 0)  # one element for all
    if all(s == 1 for s in lead) and last == out_last:
        return (0, 1)  # one row, for every row
    if last == 1 and tuple(lead) == tuple(out_lead):
        return (1, 0)  # one column, for every column
    raise NotImplementedError(
        f"broadcasting {shape} to {tuple(out_shape)} is not supported yet (accel broadcasts "
        "scalars, rows and columns of the result)")


def _pair(name: str, a: Operand, b: Operand) -> tuple[Array, Array]:
    """a and b as Arrays of one context and dtype (numbers and numpy arrays take the other's)."""
    if not isinstance(a, Array):
        if not isinstance(b, Array):
            raise TypeError(f"{name}: one operand must be an accel Array")
        a = _operand(a, b)
    b = _operand(b, a)
    if a._code != b._code:
        raise TypeError(f"{name}: dtypes differ ({a.accel_dtype} and {b.accel_dtype}); "
                        "convert one first")
    return a, b


def _view(shape: tuple[int, ...]) -> tuple[int, int]:
    """An output shape seen as rows x cols (the last axis the columns)."""
    cols = shape[-1] if shape else 1
    rows = int(np.prod(shape[:-1])) if shape else 1
    return rows, cols


def _binary(name: str, lhs: Operand, rhs: Operand, out: Array | None,
            device: DeviceLike) -> Future[Array]:
    a, b = _pair(name, lhs, rhs)
    if name in _LOGICAL and a._code not in _dtypes.INTEGERS | {_dtypes.BOOL}:
        raise TypeError(f"{name} of {a.accel_dtype} arrays: numpy's bitwise ops take bool and "
                        "integers only")
    ctx = _same_ctx(a, b, *([out] if out is not None else []))
    shape = np.broadcast_shapes(a.shape, b.shape)
    rows, cols = _view(shape)
    a, sa = _read_as(a, shape, rows, cols)
    b, sb = _read_as(b, shape, rows, cols)
    dst = _out_like(a, out, shape)
    dev = a._dev(device) if device is not None or a.device is not None else b._dev(None)
    return _issue("accel_binary", lambda f: _lib.lib.accel_binary(
        ctx._live(), dev, _BINARY[name], dst.handle, rows, cols, a.handle, sa, b.handle, sb,
        f), (a, b, dst), dst)


def add(a: Operand, b: Operand, out: Array | None = None, *,
        device: DeviceLike = None) -> Future[Array]:
    """out = a + b element-wise, numpy's broadcasting of scalars, rows and columns. a or b
    may be a number or a numpy array (converted to the other's dtype); float32, float64,
    float16, bfloat16 (the nn package's dtypes), int32 and uint32 (wrapping, as numpy's).
    Future of out."""
    return _binary("add", a, b, out, device)


def subtract(a: Operand, b: Operand, out: Array | None = None, *,
             device: DeviceLike = None) -> Future[Array]:
    """out = a - b, as add()."""
    return _binary("subtract", a, b, out, device)


def multiply(a: Operand, b: Operand, out: Array | None = None, *,
             device: DeviceLike = None) -> Future[Array]:
    """out = a * b, as add()."""
    return _binary("multiply", a, b, out, device)


def divide(a: Operand, b: Operand, out: Array | None = None, *,
           device: DeviceLike = None) -> Future[Array]:
    """out = a / b (IEEE division, correctly rounded), as add(); floats only (numpy's `/` of
    integers gives floats: the C library refuses int32 and uint32, saying so)."""
    return _binary("divide", a, b, out, device)


def maximum(a: Operand, b: Operand, out: Array | None = None, *,
            device: DeviceLike = None) -> Future[Array]:
    """out = the larger of a and b, NaN where either is NaN (numpy's maximum), as add()."""
    return _binary("maximum", a, b, out, device)


def minimum(a: Operand, b: Operand, out: Array | None = None, *,
            device: DeviceLike = None) -> Future[Array]:
    """out = the smaller of a and b, NaN where either is NaN, as add()."""
    return _binary("minimum", a, b, out, device)


def bitwise_and(a: Operand, b: Operand, out: Array | None = None, *,
                device: DeviceLike = None) -> Future[Array]:
    """out = a & b element-wise, broadcast as add(): bool arrays (logical and: numpy's &), or
    int32 and uint32 (bitwise); floats are a TypeError, as numpy's. Future of out."""
    return _binary("bitwise_and", a, b, out, device)


def bitwise_or(a: Operand, b: Operand, out: Array | None = None, *,
               device: DeviceLike = None) -> Future[Array]:
    """out = a | b, as bitwise_and()."""
    return _binary("bitwise_or", a, b, out, device)


def bitwise_xor(a: Operand, b: Operand, out: Array | None = None, *,
                device: DeviceLike = None) -> Future[Array]:
    """out = a ^ b, as bitwise_and()."""
    return _binary("bitwise_xor", a, b, out, device)


def invert(x: Array, out: Array | None = None, *, device: DeviceLike = None) -> Future[Array]:
    """out = ~x (numpy's invert): logical not of a bool array, every bit flipped of an int32
    or uint32 one; on the device, as x ^ True (x ^ all ones). Future of out."""
    if not isinstance(x, Array):
        raise TypeError("invert: x must be an accel Array")
    ones = {_dtypes.BOOL: True, _dtypes.I32: -1, _dtypes.U32: 0xFFFFFFFF}.get(x._code)
    if ones is None:
        raise TypeError(f"invert of a {x.accel_dtype} array: numpy's ~ takes bool and integers "
                        "only")
    return _binary("bitwise_xor", x, ones, out, device)


# ---- comparisons (bool results) and where -------------------------------------------------

_COMPARE = {"equal": 0, "not_equal": 1, "less": 2, "less_equal": 3, "greater": 4,
            "greater_equal": 5}


def _compare(name: str, lhs: Operand, rhs: Operand, out: Array | None,
             device: DeviceLike) -> Future[Array]:
    a, b = _pair(name, lhs, rhs)
    ctx = _same_ctx(a, b, *([out] if out is not None else []))
    shape = np.broadcast_shapes(a.shape, b.shape)
    rows, cols = _view(shape)
    a, sa = _read_as(a, shape, rows, cols)
    b, sb = _read_as(b, shape, rows, cols)
    dst = _out_like(a, out, shape, _dtypes.BOOL)
    dev = a._dev(device) if device is not None or a.device is not None else b._dev(None)
    return _issue("accel_compare", lambda f: _lib.lib.accel_compare(
        ctx._live(), dev, _COMPARE[name], dst.handle, rows, cols, a.handle, sa, b.handle, sb,
        f), (a, b, dst), dst)


def equal(a: Operand, b: Operand, out: Array | None = None, *,
          device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a == b element-wise, broadcast as add() (IEEE: NaN equals nothing).
    Future of out."""
    return _compare("equal", a, b, out, device)


def not_equal(a: Operand, b: Operand, out: Array | None = None, *,
              device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a != b (true wherever a NaN is), as equal()."""
    return _compare("not_equal", a, b, out, device)


def less(a: Operand, b: Operand, out: Array | None = None, *,
         device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a < b, as equal()."""
    return _compare("less", a, b, out, device)


def less_equal(a: Operand, b: Operand, out: Array | None = None, *,
               device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a <= b, as equal()."""
    return _compare("less_equal", a, b, out, device)


def greater(a: Operand, b: Operand, out: Array | None = None, *,
            device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a > b, as equal()."""
    return _compare("greater", a, b, out, device)


def greater_equal(a: Operand, b: Operand, out: Array | None = None, *,
                  device: DeviceLike = None) -> Future[Array]:
    """out (bool) = a >= b, as equal()."""
    return _compare("greater_equal", a, b, out, device)


def where(cond: Operand, a: Operand, b: Operand, out: Array | None = None, *,
          device: DeviceLike = None) -> Future[Array]:
    """out = a where cond else b, element-wise, numpy's broadcasting of the three (scalars,
    rows and columns of the result): cond a bool Array (or anything numpy takes, uploaded as
    bool); a and b Arrays of one dtype, or numbers and numpy arrays taking the other's. Future
    of out; the Array at once as accel.where(...).output."""
    if not isinstance(a, Array) and not isinstance(b, Array):
        raise TypeError("where: a or b must be an accel Array (its dtype is the result's)")
    x, y = _pair("where", a, b)
    if isinstance(cond, Array):
        c = cond
    else:
        c = x.ctx.asarray(np.asarray(cond, dtype=np.bool_), device=x.device)
    if c._code != _dtypes.BOOL:
        raise TypeError(f"where: cond must be a bool array, not {c.accel_dtype} (compare "
                        "first, as in x > 0)")
    ctx = _same_ctx(c, x, y, *([out] if out is not None else []))
    shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
    rows, cols = _view(shape)
    c, sc = _read_as(c, shape, rows, cols)
    x, sa = _read_as(x, shape, rows, cols)
    y, sb = _read_as(y, shape, rows, cols)
    dst = _out_like(x, out, shape)
    dev = next((v._dev(device) for v in (x, y, c) if device is not None or v.device is not None),
               _lib.DEVICE_ANY)
    return _issue("accel_where", lambda f: _lib.lib.accel_where(
        ctx._live(), dev, dst.handle, rows, cols, c.handle, sc, x.handle, sa, y.handle, sb,
        f), (c, x, y, dst), dst)


# ---- collectives --------------------------------------------------------------------------

_REDUCE = {"sum": 0, "prod": 1, "min": 2, "max": 3}


def _members(arrays: Iterable[Array], devices: Iterable[int | None] | None
             ) -> tuple[Context, list[Array], Any, Any, int]:
    """The devices and handles of a collective: arrays[i] on devices[i] (default: each
    array's own device, which must then be one)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("a collective needs at least one array")
    for a in arrays:
        a._no_view("a collective")
    ctx = _same_ctx(*arrays)
    if devices is None:
        devices = [a.device for a in arrays]
    devices = list(devices)
    if len(devices) != len(arrays) or any(d is None for d in devices):
        raise ValueError("a collective names one device per array (devices=, or arrays "
                         "made with device=)")
    n = len(arrays)
    devs = (_lib.device_t * n)(*cast("list[int]", devices))  # no None, as checked
    handles = (_lib.handle * n)(*(a.handle for a in arrays))
    return ctx, arrays, devs, handles, n


def all_reduce(arrays: Iterable[Array], op: str = "sum", *,
               devices: Sequence[int] | None = None) -> Future[list[Array]]:
    """Every array becomes the element-wise reduction (op: "sum", "prod", "min", "max") of
    all of them, arrays[i] on devices[i] (accel_all_reduce: devices of one backend with the
    collective package). The Future's result is the list of arrays."""
    if op not in _REDUCE:
        raise ValueError(f"op must be one of {sorted(_REDUCE)}")
    ctx, arrays, devs, handles, n = _members(arrays, devices)
    return _issue("accel_all_reduce", lambda f: _lib.lib.accel_all_reduce(
        ctx._live(), devs, handles, n, _REDUCE[op], f), arrays, arrays)


def broadcast(arrays: Iterable[Array], root: int = 0, *,
              devices: Sequence[int] | None = None) -> Future[list[Array]]:
    """Every array becomes a copy of arrays[root] (accel_broadcast)."""
    ctx, arrays, devs, handles, n = _members(arrays, devices)
    return _issue("accel_broadcast", lambda f: _lib.lib.accel_broadcast(
        ctx._live(), devs, handles, n, int(root), f), arrays, arrays)


def all_gather(sends: Iterable[Array], recvs: Iterable[Array], *,
               devices: Sequence[int] | None = None) -> Future[list[Array]]:
    """Every recvs[i] becomes sends[0], sends[1], ... concatenated (accel_all_gather); each
    recv holds len(sends) times a send's elements."""
    ctx, sends, devs, send_h, n = _members(sends, devices)
    recvs = list(recvs)
    if len(recvs) != n:
        raise ValueError("all_gather: one receive array per send array")
    for r in recvs:
        r._no_view("all_gather")
    _same_ctx(*sends, *recvs)
    recv_h = (_lib.handle * n)(*(r.handle for r in recvs))
    return _issue("accel_all_gather", lambda f: _lib.lib.accel_all_gather(
        ctx._live(), devs, send_h, recv_h, n, f), sends + recvs, recvs)
