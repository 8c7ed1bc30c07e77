"""astype: an Array converted to another dtype on the device (accel_convert), as numpy's
astype and the array API's astype(x, dtype, /, *, copy=True).

The conversion reads the array through its strides, so a view (a transpose) converts in
place into a new row-major array; the same dtype makes a row-major copy. Rules (accel.h
accel_convert): int32 <-> uint32 wraps, to bool is != 0, floats to integers truncate toward
zero and saturate at the integer's limits with NaN giving 0 (numpy leaves those undefined),
to a float rounds once to nearest even.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import _dtypes, _lib
from ._array import Array
from ._errors import check
from ._future import Future

if TYPE_CHECKING:
    from ._types import DType, DeviceLike


def _view_of(x: Array) -> tuple[int, int, tuple[int, int]]:
    """x seen as rows x cols with its (row, col) strides."""
    if x._strides is not None:
        return x.shape[0], x.shape[1], x._strides
    cols = x.shape[-1] if x.shape else 1
    rows = x.size // cols if cols else 0
    return rows, cols, (cols, 1)


def astype(x: Array, dtype: DType, /, *, copy: bool = True,
           device: DeviceLike = None) -> Array:
    """x converted to `dtype` (a numpy dtype-like, "bfloat16", or an accel dtype code) on the
    device, as a new row-major Array of x's shape, at once (the op runs in order with the
    others; its error surfaces when the result is read). copy=False gives x itself when it
    is row-major and already of `dtype` (the array API's rule)."""
    if not isinstance(x, Array):
        raise TypeError(f"astype: x must be an accel Array (got {type(x).__name__})")
    code = _dtypes.code_of(dtype)
    if not copy and code == x._code and x._strides is None:
        return x
    out = Array(x.ctx, x.shape, code, x.device)
    rows, cols, (rs, cs) = _view_of(x)
    cf = _lib.future_p()
    check(_lib.lib.accel_convert(x.ctx._live(), x._dev(device), out.handle, rows, cols,
                                 x.handle, _lib.Strides(rs, cs), cf), "accel_convert")
    out._made_by = Future(cf, "accel_convert", keep=(x._buf, out._buf), output=out)
    return out
