"""Waits that Ctrl-C interrupts.

Python runs signal handlers (SIGINT's raises KeyboardInterrupt) on the main thread only, between
bytecodes: a main thread blocked in a C call runs none until the call returns. So the main thread
never blocks in libaccel for long. It waits for a future in slices of SLICE_MS (a timed
accel_future_wait each), so a handler runs within one slice; and for accel_finish on an Event,
in slices too, that a thread of its own sets (FinishJob). Other threads wait in one C
call: no signal handler runs there, and an untimed accel_future_wait lets the waiting thread
bring the completion about itself (runtime/future_help.h), which a timed one does not.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any

from . import _lib

SLICE_MS = 50  # a Ctrl-C is seen within this (plus a thread switch); each slice costs a wake-up


def interruptible() -> bool:
    """True on the thread that runs signal handlers, while the interpreter is not finalizing
    (when no handler runs any more, and no thread may be started)."""
    return threading.get_ident() == threading.main_thread().ident and not sys.is_finalizing()


def to_ms(timeout: float | None) -> int:
    """A timeout in seconds (None: forever) as libaccel's milliseconds (-1: forever)."""
    return -1 if timeout is None else max(0, int(timeout * 1000))


def future(cfut: Any, timeout: float | None) -> bool:
    """Waits up to `timeout` seconds (None: forever) for a C future; True once it completed.
    On the main thread a signal handler's exception (KeyboardInterrupt) comes out of here
    within a slice; the op goes on."""
    lib = _lib.lib
    if lib.accel_future_poll(cfut) != _lib.EAGAIN:
        return True
    if not interruptible():
        lib.accel_future_wait(cfut, to_ms(timeout))
        status: int = lib.accel_future_poll(cfut)
        return status != _lib.EAGAIN
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        ms = SLICE_MS
        if deadline is not None:
            ms = min(ms, max(0, math.ceil((deadline - time.monotonic()) * 1000)))
        # The status is the op's (which may be ETIMEDOUT itself): poll says whether it ended.
        lib.accel_future_wait(cfut, ms)
        if lib.accel_future_poll(cfut) != _lib.EAGAIN:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def event(ev: threading.Event, timeout: float | None) -> bool:
    """threading.Event.wait in slices: a lock wait is interrupted by a signal only when the
    signal is delivered to the waiting thread itself, which a process-directed one need not
    be."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        left = SLICE_MS / 1000 if deadline is None else min(SLICE_MS / 1000,
                                                            deadline - time.monotonic())
        if ev.wait(max(0.0, left)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class FinishJob:
    """accel_finish(ctx, -1) on a thread of its own, for a main thread to wait for
    interruptibly. Not a loop of timed accel_finish calls: their ACCEL_ETIMEDOUT would not
    tell a slice that ran out from an op that failed with ETIMEDOUT, whose error the call
    consumes. A job left running by a Ctrl-C or a timeout goes on; the next finish() takes
    it over, with its result (rc, once `done` is set)."""

    def __init__(self, c: Any) -> None:
        self.rc: int | None = None
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(c,), name="accel-finish", daemon=True).start()

    def _run(self, c: Any) -> None:
        self.rc = _lib.lib.accel_finish(c, -1)
        self.done.set()
