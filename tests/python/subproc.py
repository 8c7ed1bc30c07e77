"""Python scripts run in a child interpreter, for what only a whole process shows (its exit, a
signal), and what they print, read with a deadline so that a child that hangs fails the test
instead of holding it."""
import os
import queue
import subprocess
import sys
import threading

# The start of every child script: the context at argv[1], its CPU device.
PRELUDE = """
import math, signal, sys, time
import numpy as np
import accel

signal.signal(signal.SIGINT, signal.default_int_handler)  # even if our parent ignores it
ctx = accel.open(sys.argv[1])
cpu = next(d for d in ctx.devices if d.backend == "cpu")
"""

# Keeps the CPU device busy for about SECONDS: `chain`, the futures of gemms that all write
# `c`, so accel runs them one after the other. Statements, not a function: a script whose
# __main__ holds no function ends the way the issue's did (a function keeps __main__'s dict
# alive into a later step of the interpreter's finalization, where other things break first).
CHAIN = """
a = ctx.asarray(np.ones((1024, 1024), np.float32), device=cpu)
c = ctx.empty((1024, 1024), device=cpu)
accel.matmul(a, a, out=c).result()  # OpenBLAS's threads started, the pages touched
fastest = math.inf
for _ in range(3):
    t = time.monotonic()
    accel.matmul(a, a, out=c).result()
    fastest = min(fastest, time.monotonic() - t)
chain = [accel.matmul(a, a, out=c) for _ in range(math.ceil(SECONDS / fastest))]
"""


class Child:
    """A script (PRELUDE, then `body`) run by this interpreter with `args` after the URL."""

    def __init__(self, body, url, *args):
        self.proc = subprocess.Popen([sys.executable, "-c", PRELUDE + body, url, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=os.environ.copy())
        self._lines = queue.Queue()
        self._err = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines.put),
                         daemon=True).start()
        self._err_pump = threading.Thread(target=self._pump,
                                          args=(self.proc.stderr, self._err.append), daemon=True)
        self._err_pump.start()

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def line(self, timeout=60):
        """The next line it prints; fails the test if none comes within `timeout` s."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(
                f"the child printed nothing for {timeout} s:\n{self.stderr()}") from None
        if line is None:
            raise AssertionError(f"the child ended early ({self.proc.wait()}):\n{self.stderr()}")
        return line

    def wait(self, timeout):
        """Its exit status; fails the test if it is still running after `timeout` s."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the child did not exit within {timeout} s:\n{self.stderr()}") from None

    def stderr(self):
        """What it wrote to stderr (all of it once it has exited)."""
        if self.proc.poll() is not None:
            self._err_pump.join(10)
        return "\n".join(line for line in self._err if line is not None)

    def kill(self):
        self.proc.kill()
        self.proc.wait()
