"""acceld's /metrics and /healthz, scraped with a real HTTP client (urllib) from a daemon
started here with --metrics: the text checked against the Prometheus exposition format's
rules, the figures against the ops this test ran, /healthz 200 while serving and 503 once
every device is quarantined, and clear failures for a bad URL and a port already taken."""
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import accel

ACCELD = os.environ.get("ACCEL_ACCELD")
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? (\S+)$")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The build's fake NVML (tests/daemon/fake_nvml.c): acceld reports a GPU with known readings.
FAKE_NVML = os.environ.get("ACCEL_TEST_FAKE_NVML")

def start(tmp, *extra):
    conf = os.path.join(tmp, "acceld.conf")
    with open(conf, "w") as f:
        f.write("[daemon]\nlog_level=error\nfault_injection=true\n"
                f"shards={os.environ.get('ACCEL_TEST_SHARDS', '1')}\n"
                "[devices]\ncpu_devices=2\nbackends=cpu\nmax_restarts=1\n")
    url = f"ipc://{tmp}/acceld.sock"
    env = dict(os.environ)
    if FAKE_NVML and "ACCEL_NVML_LIBRARY" not in env:
        env["ACCEL_NVML_LIBRARY"] = FAKE_NVML  # GPU telemetry lines in /metrics, known readings
    proc = subprocess.Popen([ACCELD, "--config", conf, "--listen", url, "--foreground",
                             *extra], stderr=subprocess.PIPE, text=True, env=env)
    return proc, url


def wait_serving(proc, url):
    for _ in range(3000):
        try:
            accel.open(url).close()
            return
        except accel.AccelError:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
    raise AssertionError("acceld did not start")


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def parse(text):
    """Checks the exposition format's rules; returns {(name, labels): value}."""
    assert text.endswith("\n")
    helps, types, samples, family_of = {}, {}, {}, {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert re.fullmatch(NAME, name) and name not in helps, line
            helps[name] = True
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name == current and name not in types, line  # after its HELP, once
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            float(value)  # a number (or +Inf, NaN)
            base = current
            assert base is not None and name.startswith(base), f"{name} outside its family"
            kind = types[base]
            if kind == "counter":  # dcgm-exporter's names end in _TOTAL (its ECC counters)
                assert name == base and (name.endswith("_total") or (
                    name.startswith("DCGM_FI_") and name.endswith("_TOTAL"))), line
            elif kind == "histogram":
                assert name in (base + "_bucket", base + "_sum", base + "_count"), line
            else:
                assert name == base, line
            key = (name, tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                                 labels))))
            assert key not in samples, f"duplicate series {line!r}"
            samples[key] = float(value)
            family_of[key] = base
    for base, kind in types.items():
        if kind != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():
            if name == base + "_bucket":
                rest = tuple(kv for kv in labels if kv[0] != "le")
                le = dict(labels)["le"]
                series.setdefault(rest, []).append((float(le), v))
        for rest, buckets in series.items():
            buckets.sort()
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), f"{base}{rest}: buckets not cumulative"
            assert buckets[-1][0] == float("inf"), f"{base}{rest}: no +Inf bucket"
            assert samples[(base + "_count", rest)] == counts[-1]
            assert (base + "_sum", rest) in samples
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def daemon():
    if not ACCELD:
        pytest.fail("ACCEL_ACCELD (the acceld binary) is not set")
    with tempfile.TemporaryDirectory(prefix="accel-metrics-") as tmp:
        port = free_port()
        proc, url = start(tmp, "--metrics", f"http://127.0.0.1:{port}")
        try:
            wait_serving(proc, url)
            yield proc, url, port, tmp
        finally:
            proc.terminate()
            proc.wait(60)


def test_metrics_follow_the_format_and_count_the_ops(daemon):
    proc, url, port, _ = daemon
    code, ctype, text = get(port, "/healthz")
    assert (code, text) == (200, "ok\n")
    assert get(port, "/readyz")[0] == 200 and get(port, "/livez")[0] == 200
    with accel.open(url) as ctx:
        a = ctx.asarray(np.ones((32, 32), np.float32), device=0)
        outs = [accel.matmul(a, a).result() for _ in range(3)]
        outs.append(accel.relu(a, device=1).result())
        with pytest.raises(accel.AccelError):  # no device here builds kernels
            ctx.load_module("__kernel void k() {}", "opencl").log()
        code, ctype, text = get(port, "/metrics")
        assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
        s = parse(text)
        assert value(s, "accel_sessions") == 1 and value(s, "accel_connections") == 1
        clients = [(dict(ls), v) for (m, ls), v in s.items() if m == "accel_client_sessions"]
        assert len(clients) == 1 and clients[0][1] == 1  # this session, under its name
        assert value(s, "accel_client_buffers", client=clients[0][0]["client"]) == 1 + len(outs)
        assert value(s, "accel_buffers") == 1 + len(outs)
    assert value(s, "accel_ops_total", device="0", kind="gemm", status="OK") == 3
    assert value(s, "accel_ops_total", device="1", kind="elementwise", status="OK") == 1
    assert value(s, "accel_ops_total", device="none", kind="module_load",
                 status="ENOTSUP") == 1
    assert value(s, "accel_op_duration_seconds_count", device="0", kind="gemm") == 3
    assert value(s, "accel_bytes_moved_total", direction="written") >= 32 * 32 * 4
    assert value(s, "accel_device_memory_total_bytes", device="0") > 0
    assert value(s, "accel_device_memory_used_bytes", device="0") >= 32 * 32 * 4
    assert value(s, "accel_up") == 1
    assert value(s, "accel_device_quarantined", device="1") == 0
    if FAKE_NVML or os.environ.get("ACCEL_NVML_LIBRARY"):  # telemetry's series parsed above
        assert any(key[0] == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" for key in s)
    # The pin cache's series come with a backend that keeps one (CUDA); the CPU keeps none.
    assert not any(key[0].startswith(("accel_pinned", "accel_pin_cache")) for key in s)
    code, _, _ = get(port, "/nothing-here")
    assert code == 404


def test_healthz_is_503_once_every_device_is_quarantined(daemon):
    proc, url, port, _ = daemon
    with accel.open(url) as ctx:
        for dev in (0, 1):
            for _ in range(200):
                s = parse(get(port, "/metrics")[2])
                if value(s, "accel_device_quarantined", device=str(dev)) == 1:
                    break
                try:
                    ctx.inject_fault(dev)
                except accel.AccelError:
                    pass  # restarting: try again
                time.sleep(0.05)
            code, _, _ = get(port, "/healthz")
            assert code == (503 if dev == 1 else 200)  # one device left serves
    s = parse(get(port, "/metrics")[2])
    assert value(s, "accel_up") == 0
    assert value(s, "accel_device_restarts_total", device="0") >= 1
    infos = [dict(ls) for (m, ls) in s if m == "accel_device_info"]
    assert [i["state"] for i in infos] == ["quarantined", "quarantined"]
    assert all(i["backend"] == "cpu" and i["name"] for i in infos)
    code, ctype, text = get(port, "/healthz")
    assert code == 503 and "quarantined" in text
    assert get(port, "/readyz")[0] == 503  # not ready: nothing serves
    assert get(port, "/livez")[:3:2] == (200, "ok\n")  # alive: no reason to restart it


def test_a_bad_url_and_a_taken_port_are_clear_errors(daemon):
    proc, url, port, tmp = daemon
    bad = subprocess.run([ACCELD, "--foreground", "--listen", f"ipc://{tmp}/b.sock",
                          "--metrics", "ftp://127.0.0.1:1"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "--metrics ftp://127.0.0.1:1" in bad.stderr
    other = os.path.join(tmp, "other")
    os.mkdir(other)
    second, _ = start(other, "--metrics", f"http://127.0.0.1:{port}")
    _, err = second.communicate(timeout=60)
    assert second.returncode != 0
    assert "in use" in err and f"http://127.0.0.1:{port}" in err, err
