"""Futures: result, done, exception, callbacks (off accel's loop thread, allowed to call
accel), many threads at once, asyncio, timeouts, and dropped futures that keep their memory
alive until their op ends."""
import asyncio
import gc
import logging
import threading
import time

import numpy as np
import pytest

import accel

SPIN = {
    "opencl": """__kernel void spin(uint n, __global uint *v) {
                   uint x = v[0];
                   for (uint i = 0; i < n; i++) x = x * 1664525u + 1013904223u;
                   v[0] = x;
                 }""",
    "cuda": """extern "C" __global__ void spin(unsigned n, unsigned *v) {
                 unsigned x = v[0];
                 for (unsigned i = 0; i < n; i++) x = x * 1664525u + 1013904223u;
                 v[0] = x;
               }""",
}


def slow_op(ctx, kernel_device, iterations=30_000_000, size=1):
    """A launch that runs for a while (a loop on one work item), and its array."""
    dev, kind = kernel_device
    if kind == "cuda":
        iterations *= 20  # one GPU thread still runs a loop faster than a CPU core
    v = ctx.asarray(np.zeros(size, np.uint32), device=dev)
    module = ctx.load_module(SPIN[kind], kind, device=dev)
    module.log()
    return module["spin"](1, 1, np.uint32(iterations), v), v


def failing_op(ctx, kernel_device):
    """An op that fails when it runs (not when issued): a launch of a kernel not there."""
    dev, kind = kernel_device
    return ctx.load_module(SPIN[kind], kind, device=dev)["no_such_kernel"](1, 1)


def test_result_done_and_exception(ctx, kernel_device):
    a = ctx.asarray(np.arange(10, dtype=np.float32))
    f = accel.scal(2.0, a)
    assert f.result(timeout=60) is a and f.done() and f.exception() is None
    bad = failing_op(ctx, kernel_device)
    assert bad.exception().name == "ENOENT"
    with pytest.raises(accel.AccelError):
        bad.result()
    assert "no_such_kernel" in repr(bad)


def test_a_timeout_is_timeouterror_and_the_op_goes_on(ctx, kernel_device):
    f, v = slow_op(ctx, kernel_device)
    with pytest.raises(TimeoutError):
        f.result(timeout=0)
    assert f.result(timeout=120) is None and f.done()


def test_callbacks_run_once_off_the_loop_and_may_call_accel(ctx, kernel_device):
    # A callback added while the op runs goes to accel's callback thread. On a loaded machine
    # this thread may lose its core for longer than the op takes, and the op be done before
    # the callback is added (it then runs here, as documented): longer ops are tried next.
    for iterations in (5_000_000, 30_000_000, 150_000_000):
        f, v = slow_op(ctx, kernel_device, iterations)
        seen = []
        got = threading.Event()

        def on_done(fut):
            # waiting on accel from a callback would be EDEADLK on accel's loop thread
            seen.append((fut, threading.current_thread().name, v.numpy()[0]))
            got.set()

        f.add_done_callback(on_done)
        assert got.wait(120)
        assert len(seen) == 1 and seen[0][0] is f
        if seen[0][1] == "accel-futures":
            break
    assert seen[0][1] == "accel-futures"
    later = []
    f.add_done_callback(later.append)  # already done: runs at once, in this thread
    assert later == [f]


def test_a_raising_callback_is_logged_not_lost(ctx, caplog):
    a = ctx.empty(4)
    f = accel.fill(a, 1.0)
    ran = threading.Event()

    def boom(_):
        ran.set()
        raise RuntimeError("boom")

    def logged():
        return any("boom" in r.getMessage() or r.exc_info for r in caplog.records)

    with caplog.at_level(logging.ERROR, logger="accel"):
        f.add_done_callback(boom)
        assert ran.wait(60)
        # boom may have run on the callback thread, which logs after it raised: wait for it
        deadline = time.monotonic() + 60
        while not logged() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert logged()
        f.result()
        second = threading.Event()
        accel.fill(a, 2.0).add_done_callback(lambda _: second.set())
        assert second.wait(60)  # the callback thread lives on


def test_ops_from_many_threads(ctx, rng):
    errors = []
    seeds = [int(s) for s in rng.integers(0, 2**32, 8)]

    def work(seed):
        try:
            r = np.random.default_rng(seed)
            for _ in range(20):
                x = r.standard_normal(257)
                a = ctx.asarray(x)
                accel.scal(3.0, a)
                assert np.allclose(a.numpy(), 3.0 * x, rtol=1e-14)
                done = threading.Event()
                accel.relu(a).add_done_callback(lambda _: done.set())
                assert done.wait(60)
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_await_in_asyncio(ctx, rng, kernel_device):
    x = rng.standard_normal(1000)

    async def main():
        a = ctx.asarray(x)
        s = await accel.sigmoid(a)
        d = await accel.dot(s, s)
        results = await asyncio.gather(*(accel.relu(a) for _ in range(8)))
        with pytest.raises(accel.AccelError):
            await failing_op(ctx, kernel_device)
        return s.numpy(), d, results

    s, d, results = asyncio.run(main())
    ref = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(s, ref, rtol=1e-12)
    assert abs(d - ref @ ref) < 1e-9 * len(x)
    assert all(np.array_equal(r.numpy(), np.maximum(x, 0)) for r in results)


def test_a_dropped_future_keeps_its_memory_until_the_op_ends(ctx, kernel_device, rng):
    n = 1 << 16
    f, v = slow_op(ctx, kernel_device, 30_000_000, size=n)
    x = rng.integers(0, 2**32, n, dtype=np.uint32)
    write = v.write(x.copy())  # waits behind the launch; its source is the copy
    assert not write.done()
    del write  # the copy is referenced only by the dropped future now
    gc.collect()
    for _ in range(50):  # reuse the memory, had it been freed
        np.full(n, 0xFFFFFFFF, np.uint32)
    assert np.array_equal(v.numpy(timeout=120), x)
    f.result(timeout=120)


def test_an_error_that_came_before_the_drop_is_logged(ctx, caplog, kernel_device):
    """The op fails before its Future is dropped (nobody looked at it): logged at the drop."""
    from accel import _lib
    f = failing_op(ctx, kernel_device)
    deadline = time.monotonic() + 120
    while _lib.lib.accel_future_poll(f._c) == _lib.EAGAIN and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    with caplog.at_level(logging.ERROR, logger="accel"):
        del f
        gc.collect()
    assert any("ENOENT" in r.getMessage() and "dropped" in r.getMessage()
               for r in caplog.records)


def test_an_error_nobody_looked_at_is_logged(ctx, caplog, kernel_device):
    with caplog.at_level(logging.ERROR, logger="accel"):
        failing_op(ctx, kernel_device)  # the future is dropped at once
        gc.collect()
        accel.fill(ctx.empty(1, np.float32), 0).result()
        # the launch waits for its module's build: seconds on a busy machine
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any("dropped" in r.getMessage() for r in caplog.records):
                break
            threading.Event().wait(0.01)
    assert any("ENOENT" in r.getMessage() and "dropped" in r.getMessage()
               for r in caplog.records)
