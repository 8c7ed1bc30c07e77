"""accel's public API as a typed program uses it, for test_typing.py (not a test itself).

mypy checks this file against the package's annotations; each reveal_type() line says, in
its comment, the type mypy must reveal there. run() is also run against a real context, with
reveal_type replaced by a recorder, so the test checks that the values are of those types.
rejected() is only type-checked: each of its lines is an error mypy must report (its
`type: ignore` would otherwise be unused, which the test's flags make an error).
"""
from __future__ import annotations

from typing import reveal_type

import numpy as np

import accel


def run(ctx: accel.Context) -> None:
    reveal_type(ctx.devices)  # builtins.list[accel._context.Device]
    reveal_type(ctx.devices[0].backend)  # builtins.str
    a = ctx.asarray(np.random.rand(4, 3).astype(np.float32))
    b = ctx.asarray(np.random.rand(3, 2).astype(np.float32))
    reveal_type(a)  # accel._array.Array
    reveal_type(ctx.zeros((4, 3)))  # accel._array.Array
    reveal_type(ctx.empty(5, dtype=np.int32))  # accel._array.Array
    reveal_type(a.shape)  # builtins.tuple[builtins.int, ...]
    reveal_type(a.dtype)  # numpy.dtype[Any]
    reveal_type(a.device)  # Union[builtins.int, None]
    reveal_type(a @ b)  # accel._array.Array
    reveal_type(a.T @ a)  # accel._array.Array
    reveal_type(a + 1.0)  # accel._array.Array
    reveal_type(2.0 * a)  # accel._array.Array
    reveal_type(a / np.ones(3, np.float32))  # accel._array.Array
    reveal_type(-a)  # accel._array.Array
    reveal_type(a == a)  # accel._array.Array
    reveal_type(a != 0.5)  # accel._array.Array
    reveal_type(a > 0.5)  # accel._array.Array
    mask = a > 0.5
    reveal_type(~mask & (a < 0.9) | mask)  # accel._array.Array
    reveal_type(a[0])  # accel._array.Array
    reveal_type(a[1:3])  # accel._array.Array
    reveal_type(a.reshape(-1))  # accel._array.Array
    reveal_type(a.astype(np.float64))  # accel._array.Array
    reveal_type(accel.astype(a, np.int32))  # accel._array.Array
    reveal_type(a.sum())  # accel._array.Array
    reveal_type(accel.max(a, axis=0, keepdims=True))  # accel._array.Array
    reveal_type(float(a.mean()))  # builtins.float
    reveal_type(a.numpy())  # numpy.ndarray[Any, numpy.dtype[Any]]
    reveal_type(np.asarray(a))  # numpy.ndarray[Any, numpy.dtype[Any]]
    reveal_type(a.read())  # accel._future.Future[numpy.ndarray[Any, numpy.dtype[Any]]]
    fut = accel.matmul(a, b)
    reveal_type(fut)  # accel._future.Future[accel._array.Array]
    reveal_type(fut.output)  # accel._array.Array
    reveal_type(fut.result())  # accel._array.Array
    reveal_type(fut.done())  # builtins.bool
    reveal_type(fut.exception())  # Union[builtins.BaseException, None]
    reveal_type(accel.add(a, 1.0).result())  # accel._array.Array
    reveal_type(accel.where(mask, a, 0.0).output)  # accel._array.Array
    reveal_type(accel.exp(a).result())  # accel._array.Array
    reveal_type(accel.softmax(a).result())  # accel._array.Array
    v = a.reshape(-1)
    reveal_type(accel.dot(v, v))  # accel._future.Future[builtins.float]
    reveal_type(accel.dot(v, v).result())  # builtins.float
    both = [accel.relu(a), accel.sigmoid(a)]
    reveal_type(accel.gather(both))  # builtins.list[accel._array.Array]
    reveal_type(ctx.uniform((2, 2), seed=1))  # accel._future.Future[accel._array.Array]
    reveal_type(ctx.normal(4, seed=1, dtype=np.float64).result())  # accel._array.Array
    h = np.arange(4, dtype=np.float32)
    reveal_type(accel.from_dlpack(h, ctx=ctx, copy=True))  # accel._array.Array
    reveal_type(accel.to_bfloat16(np.ones(2)))  # numpy.ndarray[Any, numpy.dtype[Any]]
    try:
        accel.open("nosuch://host")
    except accel.AccelError as e:
        reveal_type(e)  # accel._errors.AccelError
        reveal_type(e.code)  # builtins.int
        reveal_type(e.detail)  # Union[builtins.str, None]


def static_only(ctx: accel.Context, a: accel.Array) -> None:
    """Types only: kernels need a device that builds them, collectives several devices."""
    module = ctx.load_module("__kernel void k(__global float *x) {}", "opencl")
    reveal_type(module)  # accel._kernels.Module
    reveal_type(module.build)  # accel._future.Future[Union[builtins.str, None]]
    reveal_type(module.kernel("k"))  # accel._kernels.Kernel
    reveal_type(module.kernel("k")(1, 1, accel.InOut(a)))  # accel._future.Future[None]
    summed = accel.all_reduce([a, a], devices=[0, 1])
    reveal_type(summed)  # accel._future.Future[builtins.list[accel._array.Array]]
    reveal_type(accel.open("ipc:///run/acceld/acceld.sock"))  # accel._context.Context


def rejected(ctx: accel.Context, a: accel.Array) -> None:
    accel.matmul(a, 2.0)  # type: ignore[arg-type]
    ctx.zeros((2, 2)).shape.append(3)  # type: ignore[attr-defined]
    a.sum(keepdims="yes")  # type: ignore[arg-type]
    accel.dot(a, a).result().numpy()  # type: ignore[attr-defined]
    ctx.zeros(3).numpy(timeout="1")  # type: ignore[arg-type]
    ctx.asarray(np.ones(2), device="cpu")  # type: ignore[arg-type]
    accel.open(5)  # type: ignore[arg-type]
