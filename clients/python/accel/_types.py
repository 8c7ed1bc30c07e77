"""The types the package's signatures share, for type checkers (mypy, pyright). The modules
import this under TYPE_CHECKING only (their annotations are strings, never evaluated), so it
costs nothing at run time and asks nothing more of numpy there."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, SupportsIndex, Tuple, Union

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ._array import Array
    from ._context import Device

# A shape: an int, or a sequence of ints (numpy's integers too).
Shape = Union[SupportsIndex, Sequence[SupportsIndex]]
# A dtype: anything numpy.dtype() takes, "bfloat16", or an accel dtype code (an int).
DType = Union[npt.DTypeLike, int]
# A device of a context: its index, its Device, or None (where accel places the op).
DeviceLike = Union[int, "Device", None]
# An operand of the element-wise ops: an Array, or a number or anything numpy.asarray takes
# (given the other operand's dtype).
Operand = Union["Array", npt.ArrayLike]
# A kernel launch's grid or block: up to 3 dimensions.
Dims = Union[SupportsIndex, Sequence[SupportsIndex]]
# The axis of a reduction: None (every element), one axis, or a tuple of them.
Axis = Union[SupportsIndex, Tuple[SupportsIndex, ...], None]
# A numpy array of any element type.
NDArray = npt.NDArray[Any]
# numpy's dtype objects (what Array.dtype is).
NumpyDType = np.dtype[Any]
