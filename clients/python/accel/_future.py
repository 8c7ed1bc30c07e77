"""Futures: what every op returns.

A Future wraps one of libaccel's futures. `result()` waits in C with the GIL released (on the
main thread in slices, so that Ctrl-C interrupts it: _wait.py). Callbacks (`add_done_callback`,
`await`) never run on accel's loop thread: the C future is asked to write a token to a pipe
when it completes (accel_future_notify_fd), and one Python thread reads the pipe and runs the
callbacks. So a slow callback, or a thread holding the GIL, never stalls the loop that serves
every op, and a callback may call accel freely (even wait on other futures).

That thread is started by the first Context (start_notifier), never by a Future's __del__: a
__del__ runs wherever the collector runs, also while the interpreter finalizes, where a thread
cannot start (3.11 waits for ever for it to). At exit, once every context is closed,
stop_notifier() lets it run what the tokens already written ask for, then ends it.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import struct
import sys
import threading
from typing import Any, Callable, Generator, Generic, Iterable, Protocol, TypeVar

from . import _lib, _wait
from ._errors import AccelError

_log = logging.getLogger("accel")
_F_SETPIPE_SZ = 1031  # Linux: room for 128 Ki tokens, so the loop thread never waits on us

T = TypeVar("T")


class _Completes(Protocol):
    """What the notifier calls once a C future completed (a Future, an _Orphan)."""

    def _on_complete(self) -> None:
        ...


class _Notifier:
    """The pipe that completed futures' tokens arrive on, and the thread that reads it."""

    def __init__(self) -> None:
        self._rfd, self.wfd = os.pipe2(os.O_CLOEXEC)
        try:
            fcntl.fcntl(self.wfd, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass  # the default size only makes a full pipe likelier, never wrong
        self._lock = threading.Lock()
        self._waiting: dict[int, _Completes] = {}  # token -> object with _on_complete()
        self._next = 1  # 0 is stop()'s
        self._thread = threading.Thread(target=self._run, name="accel-futures", daemon=True)
        self._thread.start()

    def register(self, cfut: Any, obj: _Completes) -> None:
        """Calls obj._on_complete() on this thread once `cfut` has completed."""
        with self._lock:
            token = self._next
            self._next += 1
            self._waiting[token] = obj
        rc = _lib.lib.accel_future_notify_fd(cfut, self.wfd, token)
        if rc < 0:
            with self._lock:
                del self._waiting[token]
            raise AccelError(rc, "accel_future_notify_fd")

    def stop(self) -> None:
        """Runs what the tokens written so far ask for, then ends the thread. The pipe stays
        open: a C future still registered would otherwise write to whatever file gets its
        number next."""
        os.write(self.wfd, struct.pack("=Q", 0))
        if threading.current_thread() is not self._thread:  # not from a callback
            self._thread.join()

    def _run(self) -> None:
        pending = b""
        while True:
            data = os.read(self._rfd, 1 << 16)
            if not data:
                return
            pending += data
            whole = len(pending) // 8
            tokens = struct.unpack_from(f"={whole}Q", pending)
            pending = pending[whole * 8:]
            for token in tokens:
                if token == 0:
                    return
                with self._lock:
                    obj = self._waiting.pop(token, None)
                if obj is not None:
                    obj._on_complete()


_notifier: _Notifier | None = None
_notifier_pid: int | None = None  # a forked child has no thread of its parent's: it starts its own
_notifier_lock = threading.Lock()
_abandoned: list[_Orphan] = []  # a forked child's _Orphans of its parent's ops


def _running() -> _Notifier | None:
    """The notifier of this process, or None."""
    n = _notifier
    return n if n is not None and _notifier_pid == os.getpid() else None


def start_notifier() -> _Notifier:
    """Starts the callback thread if it is not running (not while the interpreter finalizes:
    RuntimeError then)."""
    global _notifier, _notifier_pid
    with _notifier_lock:
        n = _running()
        if n is None:
            if sys.is_finalizing():
                raise RuntimeError("accel: no callback thread while the interpreter shuts down")
            n = _notifier = _Notifier()
            _notifier_pid = os.getpid()
        return n


def stop_notifier() -> None:
    """At exit, after every context closed: the callbacks and dropped futures of ops that
    ended have run, and the thread is gone (a later callback starts another)."""
    global _notifier
    with _notifier_lock:
        n, _notifier = _running(), None
    if n is not None:
        n.stop()


class _Orphan:
    """What a dropped, still pending Future leaves behind: the memory its op uses stays alive
    until the op ends, and an error nobody will see is logged."""

    def __init__(self, cfut: Any, keep: Any, what: str) -> None:
        _lib.lib.accel_future_retain(cfut)
        self._c, self._keep, self._what = cfut, keep, what

    def _on_complete(self) -> None:
        rc = _lib.lib.accel_future_poll(self._c)
        if rc < 0:
            _log.error("accel: %s failed and its future was dropped: %s", self._what,
                       AccelError(rc))
        _lib.lib.accel_future_release(self._c)
        self._keep = None


class Future(Generic[T]):
    """The outcome of an op, available later.

    Like concurrent.futures.Future: result(timeout), exception(timeout), done(),
    add_done_callback(fn); and awaitable in asyncio (`await ctx.dot(x, y)`).

    `output` is the op's output (an Array) at once, before the op has run: ops on it are
    ordered after this one by accel, so it can be passed on without waiting. Errors come
    only through the future.

    For type checkers a Future is generic in its result: ops give Future[Array], read()
    Future[numpy.ndarray], dot() Future[float], the collectives Future[list[Array]], a kernel
    launch Future[None], a module's build Future[str | None]. `output` is typed as the result;
    at run time it is None for dot() (its output is a device array of one element, read into
    the float), a launch and a build.
    """

    def __init__(self, cfut: Any, what: str, keep: Iterable[Any] = (), output: Any = None,
                 finish: Callable[[Any], T] | None = None) -> None:
        self._c = cfut  # owned reference to the C future
        self._what = what
        # memory the op reads or writes: alive until it completes
        self._keep: Iterable[Any] | None = keep
        self.output: T = output
        self._finish = finish  # called once on success: the result (default: output)
        self._lock = threading.Lock()
        self._settled = False
        self._result: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], object]] = []
        self._registered = False

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<accel.Future {self._what} {state}>"

    # ---- state ---------------------------------------------------------------------------

    def done(self) -> bool:
        """True once the op has completed (successfully or not). Never blocks."""
        return self._settled or _lib.lib.accel_future_poll(self._c) != _lib.EAGAIN

    def _settle(self) -> T:
        """Once the C future is complete: computes the result or the error, once."""
        with self._lock:
            if not self._settled:
                status: int = _lib.lib.accel_future_poll(self._c)
                try:
                    if status < 0:
                        self._error = AccelError(status, self._detail(status))
                    elif self._finish is not None:
                        self._result = self._finish(self._c)
                    else:
                        self._result = self.output
                except Exception as e:  # a bad conversion is the caller's error, not ours
                    self._error = e
                self._keep = None
                self._finish = None
                self._settled = True
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # T itself once settled

    def _detail(self, status: int) -> str:
        if status == _lib.EBUILD:  # a module's build: the compiler's log says why
            value = _lib.lib.accel_future_value(self._c)
            if value:
                return self._what + ":\n" + _lib.ctypes.string_at(value).decode(errors="replace")
        return self._what

    def result(self, timeout: float | None = None) -> T:
        """Waits (GIL released) up to `timeout` seconds (None: forever); returns the op's
        result or raises its AccelError. TimeoutError if it is still running then. On the
        main thread Ctrl-C interrupts the wait (KeyboardInterrupt); the op goes on."""
        if not self._settled and not _wait.future(self._c, timeout):
            raise TimeoutError(f"{self._what} still running after {timeout} s")
        return self._settle()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The op's error (None if it succeeded), waiting as result() does."""
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except Exception as e:
            return e
        return None

    # ---- callbacks -----------------------------------------------------------------------

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        """Calls fn(future) once the op has completed: at once (in this thread) if it has,
        otherwise on accel's callback thread. Exceptions from fn are logged."""
        with self._lock:
            if not self._settled and _lib.lib.accel_future_poll(self._c) == _lib.EAGAIN:
                self._callbacks.append(fn)
                if not self._registered:
                    self._registered = True
                    register = True
                else:
                    register = False
            else:
                register = None
        if register is None:
            self._run_callback(fn)
        elif register:
            start_notifier().register(self._c, self)

    def _run_callback(self, fn: Callable[[Future[T]], object]) -> None:
        try:
            fn(self)
        except Exception:
            _log.exception("accel: a done callback of %s raised", self._what)

    def _on_complete(self) -> None:
        try:
            self._settle()
        except Exception:
            pass  # kept for result() and exception()
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._run_callback(fn)

    def __await__(self) -> Generator[Any, None, T]:
        if not self.done():
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()

            def settle() -> None:
                if not waiter.done():
                    waiter.set_result(None)

            def wake(_: object) -> None:
                loop.call_soon_threadsafe(settle)

            self.add_done_callback(wake)
            yield from waiter.__await__()
        return self._settle()

    # ---- lifetime ------------------------------------------------------------------------

    def __del__(self) -> None:
        c, self._c = getattr(self, "_c", None), None
        if c is None or _lib is None or _lib.lib is None:
            return
        try:
            rc = _lib.EAGAIN if self._settled else _lib.lib.accel_future_poll(c)
            if not self._settled and rc == _lib.EAGAIN:
                self._orphan(c)
            elif not self._settled and rc < 0:  # failed before anyone looked, and now dropped
                _log.error("accel: %s failed and its future was dropped: %s", self._what,
                           AccelError(rc))
        except Exception:
            pass  # the interpreter finalizes: the modules this needs are gone
        _lib.lib.accel_future_release(c)

    def _orphan(self, c: Any) -> None:
        """The op goes on without its Future: the running callback thread keeps its memory
        alive until it ends. Without one none is started. In a forked child the parent's ops
        never end: their memory stays for good. Otherwise (the interpreter finalizes, or
        stop_notifier ran) the op is waited for here, GIL released; the contexts were closed
        at exit, so it has ended by then."""
        n = _running()
        if n is not None and not sys.is_finalizing():
            n.register(c, _Orphan(c, self._keep, self._what))
        elif _notifier_pid is not None and _notifier_pid != os.getpid():
            _abandoned.append(_Orphan(c, self._keep, self._what))
        else:
            _lib.lib.accel_future_wait(c, -1)


def gather(futures: Iterable[Future[T]], timeout: float | None = None) -> list[T]:
    """The results of several futures, in order, waiting for each (raises the first error)."""
    return [f.result(timeout) for f in futures]
