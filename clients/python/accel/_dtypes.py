"""Element types: accel's dtypes and the numpy dtypes that hold them.

numpy has no bfloat16: BF16 buffers are read and written as uint16 arrays holding the bits
(the upper half of a float32). to_bfloat16() and from_bfloat16() convert. BOOL is numpy's
bool_: one byte, 0 or 1 (what comparisons give and where() takes).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._types import DType, NDArray, NumpyDType

F32, U32, F64, F16, BF16, I32, BOOL = 1, 2, 3, 4, 5, 6, 7

bfloat16: str = "bfloat16"  # pass as dtype= for BF16 buffers

_NAMES: dict[int, str] = {F32: "float32", U32: "uint32", F64: "float64", F16: "float16",
                          BF16: "bfloat16", I32: "int32", BOOL: "bool"}
_STORAGE: dict[int, NumpyDType] = {
    F32: np.dtype(np.float32), U32: np.dtype(np.uint32), F64: np.dtype(np.float64),
    F16: np.dtype(np.float16), BF16: np.dtype(np.uint16), I32: np.dtype(np.int32),
    BOOL: np.dtype(np.bool_)}
_FROM_NUMPY: dict[NumpyDType, int] = {
    np.dtype(np.float32): F32, np.dtype(np.uint32): U32, np.dtype(np.float64): F64,
    np.dtype(np.float16): F16, np.dtype(np.int32): I32, np.dtype(np.bool_): BOOL}
INTEGERS = frozenset((I32, U32))


def code_of(dtype: DType) -> int:
    """accel's dtype code for a numpy dtype-like or "bfloat16"; TypeError for others."""
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return BF16
    if type(dtype) is int and dtype in _NAMES:  # already a code
        return dtype
    try:
        # an int that is no code: numpy raises TypeError too
        code = _FROM_NUMPY.get(np.dtype(cast("npt.DTypeLike", dtype)))
    except TypeError:
        code = None
    if code is None:
        raise TypeError(f"accel has no dtype {dtype!r}: float32, float64, float16, bfloat16 "
                        "(as uint16 bits), int32, uint32 and bool")
    return code


def storage(code: int) -> NumpyDType:
    """The numpy dtype that holds elements of accel dtype `code`."""
    return _STORAGE[code]


def name(code: int) -> str:
    return _NAMES[code]


def names_of_set(bits: int) -> frozenset[str]:
    """The names of a device info's dtype set (bits 1 << code)."""
    return frozenset(n for c, n in _NAMES.items() if bits & (1 << c))


def to_bfloat16(x: npt.ArrayLike) -> NDArray:
    """float32 values (any float array) as bfloat16 bits in uint16, rounded to nearest even,
    NaN kept NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    quiet_nan = (u >> np.uint32(16)) | np.uint32(0x40)
    return np.where(np.isnan(u.view(np.float32)), quiet_nan, rounded).astype(np.uint16)


def from_bfloat16(bits: npt.ArrayLike) -> NDArray:
    """bfloat16 bits (uint16) as float32 values (exact)."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)
