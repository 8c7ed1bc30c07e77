"""accel for Python: compute on every device of a machine, with numpy arrays.

    import numpy as np, accel
    with accel.open() as ctx:                       # in-process; or "ipc://..." for acceld
        a = ctx.asarray(np.random.rand(256, 128).astype(np.float32))
        b = ctx.asarray(np.random.rand(128, 64).astype(np.float32))
        c = accel.matmul(a, b).result()             # ops return futures
        print(c.numpy())

A binding of libaccel (ctypes): the same runtime and the same wire protocol as C programs.
libaccel is found through $ACCEL_LIBRARY, the directory accel was installed to, then the
dynamic linker's search path.
"""
from . import _lib
from ._array import Array
from ._context import Context, Device, open
from ._convert import astype
from ._dtypes import bfloat16, from_bfloat16, to_bfloat16
from ._errors import AccelError
from ._future import Future, gather
from ._kernels import In, InOut, Kernel, Module, Out, local
from ._ops import (abs, add, all_gather, all_reduce, axpy, bitwise_and, bitwise_or,
                   bitwise_xor, broadcast, divide, dot, equal, exp, fill, greater, greater_equal,
                   invert, less, less_equal, log, matmul, maximum, minimum, multiply, not_equal,
                   random_fill, relu, scal, sigmoid, softmax, sqrt, subtract, tanh, where)
from ._reduce import max, mean, min, sum


def from_dlpack(x: object, *, ctx: Context, device: "int | Device | None" = None,
                copy: "bool | None" = None) -> Array:
    """An Array over the memory of `x` (a numpy array, a PyTorch or CuPy tensor: anything
    with __dlpack__) without a copy, in context `ctx` (in-process: through acceld memory
    cannot be shared, BufferError). Host memory goes to the first CPU device, CUDA memory to
    accel's device of that CUDA ordinal (open with cuda_context=primary), unless `device`
    names one. The array is pinned there for its life: accel's ops on it run there, so both
    sides see each other's writes (ordering them is the caller's: finish accel's ops before
    reading on the other side). The producer's memory is let go when the array's buffer is
    freed. copy=True copies instead (through numpy)."""
    return ctx.from_dlpack(x, device, copy)

__version__ = _lib.lib.accel_version().decode()

__all__ = [
    "AccelError", "Array", "Context", "Device", "Future", "In", "InOut", "Kernel", "Module",
    "Out", "abs", "add", "astype", "all_gather", "all_reduce", "axpy", "bitwise_and",
    "bitwise_or", "bitwise_xor", "broadcast", "bfloat16", "divide", "dot", "from_dlpack",
    "invert",
    "equal", "exp", "fill", "from_bfloat16", "gather", "greater", "greater_equal", "less",
    "less_equal", "local", "log", "matmul", "max", "maximum", "mean", "min", "minimum",
    "multiply", "not_equal", "open", "random_fill", "relu", "scal", "sigmoid", "softmax", "sqrt",
    "subtract", "sum", "tanh", "to_bfloat16", "where",
]
