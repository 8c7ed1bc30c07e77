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

__version__ = _lib.lib.accel_version().decode()

__all__ = [
    "AccelError", "Array", "Context", "Device", "Future", "In", "InOut", "Kernel", "Module",
    "Out", "abs", "add", "astype", "all_gather", "all_reduce", "axpy", "bitwise_and",
    "bitwise_or", "bitwise_xor", "broadcast", "bfloat16", "divide", "dot", "invert",
    "equal", "exp", "fill", "from_bfloat16", "gather", "greater", "greater_equal", "less",
    "less_equal", "local", "log", "matmul", "max", "maximum", "mean", "min", "minimum",
    "multiply", "not_equal", "open", "random_fill", "relu", "scal", "sigmoid", "softmax", "sqrt",
    "subtract", "sum", "tanh", "to_bfloat16", "where",
]
