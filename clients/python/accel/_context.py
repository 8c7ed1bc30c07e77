"""Contexts: a connection to accel (in-process, or acceld over ipc:// or tcp://).

Every context still open at exit is closed by an atexit handler, before the interpreter
finalizes (where __del__ may run late or never): see _close_all_at_exit.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import numpy as np

from . import _dtypes, _future, _lib, _ops, _wait
from ._array import Array
from ._kernels import Module
from ._errors import AccelError, check
from ._future import Future

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._types import DType, DeviceLike, NDArray, Shape

_PACKAGES = {0x1: "blas", 0x2: "rng", 0x4: "nn", 0x8: "module", 0x10: "collective"}
_SOURCES = {1: "cuda", 2: "ptx", 3: "opencl", 4: "spirv"}
_STATES = {0: "serving", 1: "restarting", 2: "quarantined"}
_KINDS = {0: "cpu", 1: "gpu", 2: "accelerator"}


@dataclass(frozen=True)
class Device:
    """One device of a context, as accel_device_info describes it."""

    index: int
    name: str
    backend: str  # "cpu", "cuda", "opencl"
    kind: str  # "cpu", "gpu", "accelerator"
    mem_bytes: int
    compute_units: int
    state: str  # "serving", "restarting", "quarantined"
    restarts: int
    packages: frozenset[str]  # of "blas", "rng", "nn", "module", "collective"
    gemm_dtypes: frozenset[str]  # dtype names ("float32", "bfloat16", ...)
    vector_dtypes: frozenset[str]
    rng_dtypes: frozenset[str]
    nn_dtypes: frozenset[str]
    sources: frozenset[str]  # user kernel sources it builds: "cuda", "ptx", "opencl", "spirv"
    collective_dtypes: frozenset[str]  # of all_reduce, broadcast, all_gather (C API only for now)


def _device_from(index: int, info: _lib.DeviceInfo) -> Device:
    return Device(
        index=index,
        name=info.name.decode(errors="replace"),
        backend=info.backend.decode(errors="replace"),
        kind=_KINDS.get(info.kind, str(info.kind)),
        mem_bytes=info.mem_bytes,
        compute_units=info.compute_units,
        state=_STATES.get(info.state, str(info.state)),
        restarts=info.restarts,
        packages=frozenset(n for b, n in _PACKAGES.items() if info.packages & b),
        gemm_dtypes=_dtypes.names_of_set(info.gemm_dtypes),
        vector_dtypes=_dtypes.names_of_set(info.vector_dtypes),
        rng_dtypes=_dtypes.names_of_set(info.rng_dtypes),
        nn_dtypes=_dtypes.names_of_set(info.nn_dtypes),
        sources=frozenset(n for c, n in _SOURCES.items() if info.sources & (1 << c)),
        collective_dtypes=_dtypes.names_of_set(info.collective_dtypes),
    )


def open(url: str | None = None) -> Context:  # noqa: A001 - the package's verb, as in accel_open
    """Opens a context: `url` as accel_open takes it ("embedded:?backends=cpu,opencl",
    "ipc:///run/acceld/acceld.sock", "tcp://host:port", "tls+tcp://host:port"); with None,
    $ACCEL_URL, else an in-process runtime with every backend it finds. A context manager:
    `with accel.open() as ctx: ...` closes it on exit."""
    return Context(url)


class Context:
    """A context: devices, arrays, ops, modules. Safe to use from any thread."""

    def __init__(self, url: str | None = None) -> None:
        _future.start_notifier()  # here, never in a Future's __del__ (_future.py)
        if url is None:
            url = os.environ.get("ACCEL_URL") or None
        c = _lib.ctx_p()
        check(_lib.lib.accel_open(ctypes.byref(c), url.encode() if url else None),
              f"accel_open {url or 'embedded:'}")
        self._c: int | None = c.value  # _c: None once closed; _open_c until released
        self._open_c: int | None = c.value
        self.url: str = url or "embedded:"
        self._host_blocks: weakref.WeakValueDictionary[int, _HostBlock] = \
            weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        # a _wait.FinishJob left running (Ctrl-C, timeout), or None
        self._finishing: _wait.FinishJob | None = None
        self._pid = os.getpid()
        _open_contexts.add(self)

    def close(self) -> None:
        """Waits for the context's ops, frees its arrays (they become unusable: ops on them
        raise ECLOSED) and closes it. Closing twice does nothing. Arrays from host_empty()
        stay valid: while any is alive, the connection is only closed when the last goes.
        On the main thread Ctrl-C interrupts the wait for the ops (KeyboardInterrupt), and
        the context stays open."""
        if self._c and _wait.interruptible():
            self._wait_idle()
        self._close()

    def _wait_idle(self) -> None:
        """Waits interruptibly for the ops (their errors are not close()'s to report)."""
        with self._lock:
            busy = self._finishing is not None
        if busy or _lib.lib.accel_finish(self._open_c, 0) == _lib.ETIMEDOUT:
            self._join_finish(None)

    def _close(self) -> None:
        with self._lock:
            self._c = None
            blocks_alive = len(self._host_blocks) > 0
        if not blocks_alive:
            self._release()

    def _release(self) -> None:
        with self._lock:
            c, self._open_c = self._open_c, None
        if c:
            self._quiesce(c)
            _lib.lib.accel_close(c)

    def _quiesce(self, c: int) -> None:
        """Waits for c's ops, and for an accel_finish left running on c by an interrupted
        finish(): accel_close frees what that call waits on. The ops are waited for in C,
        not interruptibly, so the job's wait ends with this one."""
        with self._lock:
            job, self._finishing = self._finishing, None
        if job is not None:
            _lib.lib.accel_finish(c, -1)
            try:
                job.done.wait()
            except BaseException:  # a Ctrl-C in the moment the job takes to return
                with self._lock:
                    self._open_c, self._finishing = c, job  # closed later, after it
                raise

    def _close_at_exit(self) -> None:
        """No op may run on at exit: libaccel's CPU backend computes on OpenBLAS's threads,
        and OpenBLAS's exit-time destructor (0.3.21) waits for ever for a thread whose gemm
        ends after it began (the thread overwrites the stop request). So the context is
        closed, waiting for its ops; one that arrays from host_empty() still use is only
        finished, since the interpreter may read them while it finalizes."""
        with self._lock:
            c = self._open_c
            self._c = None
            blocks_alive = len(self._host_blocks) > 0
        if c is None:
            return
        if blocks_alive:
            _lib.lib.accel_finish(c, -1)
            self._quiesce(c)
        else:
            self._release()

    def _host_block_freed(self) -> None:
        with self._lock:
            last = self._c is None and len(self._host_blocks) == 0
        if last:
            self._release()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_open_c", None) and _lib.lib is not None:
            self._close()  # no waiting thread started here: the collector may run anywhere

    def __repr__(self) -> str:
        return f"<accel.Context {self.url}{'' if self._c else ' closed'}>"

    def _live(self) -> int:
        if not self._c:
            raise AccelError(-12, "the context is closed")  # ECLOSED
        return self._c

    # ---- devices -------------------------------------------------------------------------

    @property
    def devices(self) -> list[Device]:
        """The devices, in accel's numbering."""
        c = self._live()
        n = check(_lib.lib.accel_device_count(c), "accel_device_count")
        out = []
        for i in range(n):
            info = _lib.DeviceInfo()
            check(_lib.lib.accel_device_info(c, i, ctypes.byref(info)), "accel_device_info")
            out.append(_device_from(i, info))
        return out

    def _backends(self) -> tuple[str, ...]:
        """Each device's backend name, by accel's index: read once per context (a context's
        devices are fixed when it opens) for the paths that must stay cheap (DLPack)."""
        cached: tuple[str, ...] | None = self.__dict__.get("_backend_names")
        if cached is None:
            cached = self._backend_names = tuple(d.backend for d in self.devices)
        return cached

    def _device_index(self, device: DeviceLike) -> int:
        """accel's index of `device` (a Device or an int), checked against this context's
        devices: a wrong one fails here, where the array is made, not at its first op."""
        if device is None:
            return _lib.DEVICE_ANY
        index = device.index if isinstance(device, Device) else int(device)
        n = check(_lib.lib.accel_device_count(self._live()), "accel_device_count")
        if not 0 <= index < n:
            raise ValueError(f"device {index}: no such device (this context has {n}: "
                             f"{', '.join(f'{d.index} {d.backend}' for d in self.devices)})")
        return index

    # ---- arrays --------------------------------------------------------------------------

    def empty(self, shape: Shape, dtype: DType = np.float32, device: DeviceLike = None) -> Array:
        """A new array; its contents are unspecified until written."""
        self._live()
        return Array(self, shape, dtype, self._device_index(device) if device is not None
                     else None)

    def full(self, shape: Shape, value: SupportsFloat, dtype: DType = np.float32,
             device: DeviceLike = None) -> Array:
        """A new array with every element `value` (waits for the fill)."""
        a = self.empty(shape, dtype, device)
        a.fill(value).result()
        return a

    def zeros(self, shape: Shape, dtype: DType = np.float32, device: DeviceLike = None) -> Array:
        return self.full(shape, 0, dtype, device)

    def asarray(self, x: npt.ArrayLike, dtype: DType | None = None,
                device: DeviceLike = None) -> Array:
        """A new array with the contents of `x` (a numpy array or anything numpy takes),
        keeping its shape; dtype: x's unless given (float32, float64, float16, int32,
        uint32; bfloat16 takes uint16 bits, see to_bfloat16). Waits for the write; a
        C-contiguous x of the right dtype is written from its own memory, without a copy."""
        if dtype is None:
            x = np.asarray(x)
            dtype = x.dtype
        a = self.empty(np.shape(x), dtype, device)
        a.write(x).result()
        return a

    def from_dlpack(self, x: Any, device: DeviceLike = None, copy: bool | None = None) -> Array:
        """accel.from_dlpack(x, ctx=self, device=device, copy=copy)."""
        from . import _dlpack

        return _dlpack.from_dlpack(self, x, device, copy)

    def host_empty(self, shape: Shape, dtype: DType = np.float32) -> NDArray:
        """A numpy array in accel's host memory (accel_host_alloc). Through acceld's local
        socket it is shared with the daemon: reads into it and writes from it copy nothing
        in this process and send nothing through the socket. Freed when the array (and every
        view of it) is collected, or at close()."""
        code = _dtypes.code_of(dtype)
        dims: tuple[int, ...] = tuple(np.atleast_1d(np.asarray(shape, dtype=np.int64)).tolist()) \
            if not isinstance(shape, int) else (shape,)
        nbytes = int(np.prod(dims)) * _dtypes.storage(code).itemsize
        block = _HostBlock(self, max(nbytes, 1))
        arr = np.frombuffer(block.view(), dtype=_dtypes.storage(code),
                            count=int(np.prod(dims))).reshape(dims)
        return arr

    # ---- random numbers ------------------------------------------------------------------

    def uniform(self, shape: Shape, *, seed: int, offset: int = 0, dtype: DType = np.float32,
                device: DeviceLike = None) -> Future[Array]:
        """Future of a new array of uniform numbers in (0, 1] (float32, float64, float16,
        bfloat16), from accel's Philox stream at (seed, offset): the same numbers as the C
        API's accel_rng_fill, on every device."""
        return _ops.random_fill(self.empty(shape, dtype, device), "uniform", seed=seed,
                                offset=offset)

    def normal(self, shape: Shape, *, seed: int, offset: int = 0, mean: SupportsFloat = 0.0,
               stddev: SupportsFloat = 1.0, dtype: DType = np.float32,
               device: DeviceLike = None) -> Future[Array]:
        """Future of a new array of normal numbers (Box-Muller; offset even)."""
        return _ops.random_fill(self.empty(shape, dtype, device), "normal", seed=seed,
                                offset=offset, mean=mean, stddev=stddev)

    def bits(self, shape: Shape, *, seed: int, offset: int = 0,
             device: DeviceLike = None) -> Future[Array]:
        """Future of a new uint32 array: words offset .. of the Philox4x32-10 stream, bit for
        bit those of accel_rng_fill with ACCEL_DIST_BITS (and cuRAND's Philox)."""
        return _ops.random_fill(self.empty(shape, np.uint32, device), "bits", seed=seed,
                                offset=offset)

    # ---- user kernels --------------------------------------------------------------------

    def load_module(self, code: str | bytes, kind: str, options: str | None = None,
                    device: DeviceLike = None) -> Module:
        """Builds user kernels from source: kind "opencl" (OpenCL C), "cuda" (CUDA C through
        NVRTC), "ptx" or "spirv"; for `device`, or every device that takes the kind (None).
        Returns a Module at once (see Module.build for the build's outcome)."""
        return Module(self, code, kind, options, device)

    # ---- whole-context -------------------------------------------------------------------

    def finish(self, timeout: float | None = None) -> None:
        """Waits up to `timeout` seconds (None: forever) for every op issued so far; raises
        the first error of the ops since the last finish (accel_finish), AccelError ETIMEDOUT
        if some still run then. On the main thread Ctrl-C interrupts the wait
        (KeyboardInterrupt); the next finish() reports what this one would have."""
        c = self._live()
        with self._lock:
            job = self._finishing
        short = timeout is not None and timeout * 1000 <= _wait.SLICE_MS  # over before a ^C
        if job is None and (short or not _wait.interruptible()):
            check(_lib.lib.accel_finish(c, _wait.to_ms(timeout)), "accel_finish")
            return
        check(self._join_finish(timeout), "accel_finish")

    def _join_finish(self, timeout: float | None) -> int:
        """Waits for the finish job (started if none runs); its accel_finish result, or
        ETIMEDOUT after `timeout` seconds, the job going on."""
        with self._lock:
            job = self._finishing
            if job is None:
                job = self._finishing = _wait.FinishJob(self._open_c)
        if not _wait.event(job.done, timeout):
            return _lib.ETIMEDOUT
        with self._lock:
            if self._finishing is job:
                self._finishing = None
        return cast(int, job.rc)  # set before `done`

    def transfer_stats(self) -> dict[str, int]:
        """Bytes moved so far: host_to_device, device_to_host, device_to_device, written,
        read."""
        s = _lib.TransferStats()
        check(_lib.lib.accel_transfer_stats_get(self._live(), ctypes.byref(s)),
              "accel_transfer_stats_get")
        return {name: getattr(s, name) for name, _ in s._fields_}

    def inject_fault(self, device: DeviceLike) -> None:
        """Tests: the device faults (only on contexts opened with fault_injection=1)."""
        check(_lib.lib.accel_inject_fault(self._live(), self._device_index(device)),
              "accel_inject_fault")


class _HostBlock:
    """accel_host_alloc memory, exposed to numpy as a writable buffer. numpy arrays made over
    it keep it alive; it is freed when the last goes, or when its context closes first."""

    def __init__(self, ctx: Context, nbytes: int) -> None:
        p = ctypes.c_void_p()
        check(_lib.lib.accel_host_alloc(ctx._live(), nbytes, ctypes.byref(p)),
              "accel_host_alloc")
        self._ctx, self._n = ctx, nbytes
        self._p: int | None = p.value
        self._lock = threading.Lock()
        ctx._host_blocks[id(self)] = self

    def view(self) -> Any:
        raw = (ctypes.c_ubyte * self._n).from_address(cast(int, self._p))  # not freed yet
        raw._block = self  # type: ignore[attr-defined]  # numpy array -> ctypes array -> block
        return raw

    def free(self) -> None:
        with self._lock:
            p, self._p = self._p, None
        if p:
            _lib.lib.accel_host_free(self._ctx._open_c, p)
            self._ctx._host_blocks.pop(id(self), None)
            self._ctx._host_block_freed()

    def __del__(self) -> None:
        if _lib.lib is not None:
            self.free()


_open_contexts: weakref.WeakSet[Context] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    """Runs before the interpreter finalizes, with every thread still running: closes the
    contexts this process opened (a forked child's inherited ones are its parent's), then
    lets the callback thread run what their ended ops ask for and stops it."""
    for ctx in list(_open_contexts):
        if ctx._pid == os.getpid():
            ctx._close_at_exit()
    _future.stop_notifier()
