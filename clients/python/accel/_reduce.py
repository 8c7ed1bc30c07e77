"""Reductions: sum, max, min and mean of an Array, over every element or along its first or
last axis, as numpy's (accel_reduction: one op on the device, reading the array in place).

The result is an Array at once (the op runs in order with the others; its error, if any,
surfaces when the result is read): 0-d for axis=None, as numpy's scalar result would be.
Kept apart from _ops.py, whose module-level sum/max/min would shadow the builtins there.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _lib
from ._array import Array
from ._errors import check
from ._future import Future

if TYPE_CHECKING:
    from ._types import Axis, DeviceLike

_OPS = {"sum": 0, "max": 1, "min": 2, "mean": 3}
_ALL, _ROWS, _COLS = 0, 1, 2  # accel_axis
_NUMPY_NAME = {"max": "maximum", "min": "minimum"}
_AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


def _plan(shape: tuple[int, ...], axis: Any
          ) -> tuple[int, int, int, tuple[int, ...], tuple[int, ...]]:
    """(rows, cols, accel_axis, result shape, keepdims shape) for reducing `shape` along
    `axis` (None: everything; else the first or the last axis of an n-d array)."""
    ndim, size = len(shape), math.prod(shape)
    if isinstance(axis, tuple) and sorted(a % ndim if ndim else a for a in axis) == list(
            range(ndim)):
        axis = None  # every axis: the whole array
    if axis is None:
        return 1, size, _ALL, (), (1,) * ndim
    if isinstance(axis, tuple) and len(axis) == 1:
        axis = axis[0]
    if not isinstance(axis, (int, np.integer)):
        raise NotImplementedError(f"axis={axis!r}: accel reduces over one axis or all of them")
    if not -ndim <= axis < ndim:
        raise _AxisError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    axis = int(axis) % ndim
    keep = tuple(1 if i == axis else s for i, s in enumerate(shape))
    rest = shape[:axis] + shape[axis + 1:]
    if axis == 0:  # one output per element of the rest: the columns of (shape[0], rest)
        return shape[0], math.prod(rest), _ROWS, rest, keep
    if axis == ndim - 1:  # one output per row of (rest, shape[-1])
        return math.prod(rest), shape[-1], _COLS, rest, keep
    raise NotImplementedError(f"axis={axis} of a {ndim}-d array: accel reduces over the first "
                              "axis, the last or all of them")


def _reduce(name: str, x: Array, axis: Axis, keepdims: bool, device: DeviceLike) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: x must be an accel Array (got {type(x).__name__})")
    rows, cols, how, shape, keep = _plan(tuple(x.shape), axis)
    folds = rows * cols if how == _ALL else rows if how == _ROWS else cols
    outputs = 1 if how == _ALL else cols if how == _ROWS else rows
    if name in _NUMPY_NAME and folds == 0 and outputs > 0:
        raise ValueError(f"zero-size array to reduction operation {_NUMPY_NAME[name]} which "
                         "has no identity")
    out = Array(x.ctx, keep if keepdims else shape, x._code, x.device)
    dev = x._dev(device)
    strides = _lib.Strides(cols, 1)  # a row-major Array
    if x._strides is not None:  # a 2-D view, read in place at its strides
        rows, cols = x.shape
        strides = _lib.Strides(*x._strides)
    cf = _lib.future_p()
    check(_lib.lib.accel_reduction(x.ctx._live(), dev, _OPS[name], out.handle, rows, cols,
                                   x.handle, strides, how, cf), "accel_reduction")
    out._made_by = Future(cf, "accel_reduction", keep=(x._buf, out._buf), output=out)
    return out


def sum(x: Array, axis: Axis = None, keepdims: bool = False, *,
        device: DeviceLike = None) -> Array:  # noqa: A001 - numpy's name
    """The sum of x's elements (axis=None), or along its first or last axis, as numpy's
    (float dtypes: float16 and bfloat16 accumulate in float32; of no elements, 0). An Array:
    0-d for axis=None (keepdims: every axis kept, of length 1)."""
    return _reduce("sum", x, axis, keepdims, device)


def max(x: Array, axis: Axis = None, keepdims: bool = False, *,
        device: DeviceLike = None) -> Array:  # noqa: A001
    """The largest element, as sum(); NaN if any element is NaN (numpy's max); ValueError
    where an output would fold no element, as numpy raises."""
    return _reduce("max", x, axis, keepdims, device)


def min(x: Array, axis: Axis = None, keepdims: bool = False, *,
        device: DeviceLike = None) -> Array:  # noqa: A001
    """The smallest element, as max()."""
    return _reduce("min", x, axis, keepdims, device)


def mean(x: Array, axis: Axis = None, keepdims: bool = False, *,
         device: DeviceLike = None) -> Array:
    """The arithmetic mean, as sum() (NaN of no elements, where numpy also warns)."""
    return _reduce("mean", x, axis, keepdims, device)
