"""Fixtures for the Python package's tests.

Every test that takes `ctx` runs against one context: in-process ($ACCEL_TEST_URL, default
the CPU backend and the OpenCL devices PoCL gives), or, with ACCEL_TEST_ACCELD set to an acceld
binary, through a daemon started for the session on an ipc:// socket with the same backends
(on a GPU machine: ACCEL_TEST_URL="embedded:?backends=cpu,cuda").
`url` is that context's URL, for tests that open their own.
Inputs are random and fresh on every run; the seed is printed with any failure.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

import accel

EMBEDDED_URL = os.environ.get("ACCEL_TEST_URL") or "embedded:?backends=cpu,opencl"


def _backends(url):
    for param in url.partition("?")[2].split("&"):
        if param.startswith("backends="):
            return param[len("backends="):]
    return "cpu,cuda,opencl"


def _start_daemon(binary, tmp):
    conf = os.path.join(tmp, "acceld.conf")
    with open(conf, "w") as f:
        f.write("[daemon]\nlog_level=error\nfault_injection=true\n"
                f"shards={os.environ.get('ACCEL_TEST_SHARDS', '1')}\n"
                f"[devices]\ncpu_devices=1\nbackends={_backends(EMBEDDED_URL)}\n")
    url = f"ipc://{tmp}/acceld.sock"
    proc = subprocess.Popen([binary, "--config", conf, "--listen", url, "--foreground"])
    deadline = time.monotonic() + 60  # an OpenCL daemon builds its program when it starts
    while True:
        try:
            accel.open(url).close()
            return proc, url
        except accel.AccelError as e:
            if e.name != "ECLOSED" or proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"acceld did not start (exit {proc.poll()}): {e}")
            time.sleep(0.02)


@pytest.fixture(scope="session")
def url():
    binary = os.environ.get("ACCEL_TEST_ACCELD")
    if not binary:
        yield EMBEDDED_URL
        return
    tmp = tempfile.mkdtemp(prefix="accel-py-")
    proc, daemon_url = _start_daemon(binary, tmp)
    yield daemon_url
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, "acceld did not stop cleanly"
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def session_ctx(url):
    with accel.open(url) as c:
        yield c


@pytest.fixture
def ctx(session_ctx):
    return session_ctx


@pytest.fixture(scope="session")
def through_daemon():
    return bool(os.environ.get("ACCEL_TEST_ACCELD"))


@pytest.fixture
def rng(request):
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    print(f"numpy seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def kernel_device(ctx):
    """The first device that builds OpenCL C (PoCL in CI), or CUDA C where there is none."""
    for kind in ("opencl", "cuda"):
        for d in ctx.devices:
            if kind in d.sources:
                return d, kind
    pytest.fail("no device builds user kernels: the tests need PoCL (pocl-opencl-icd)")
