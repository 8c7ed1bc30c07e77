"""Collectives from Python: all_reduce, broadcast and all_gather over several CPU devices of
an in-process context (each its own memory node), checked against numpy; the C suites
(api-multi) test them through acceld as well."""
import numpy as np
import pytest

import accel


@pytest.fixture
def cpus():
    with accel.open("embedded:?backends=cpu&cpu_devices=3") as c:
        yield c


def test_all_reduce_sums_like_numpy(cpus, rng):
    xs = [rng.standard_normal(int(rng.integers(1, 5000))).astype(np.float32)]
    xs += [rng.standard_normal(xs[0].size).astype(np.float32) for _ in range(2)]
    arrays = [cpus.asarray(x, device=i) for i, x in enumerate(xs)]
    result = accel.all_reduce(arrays, "sum").result()
    assert result == arrays
    want = np.sum(np.stack(xs).astype(np.float64), axis=0)
    mag = np.sum(np.abs(np.stack(xs).astype(np.float64)), axis=0)
    for a in arrays:
        got = a.numpy()
        assert np.all(np.abs(got - want) <= 3 * 2.0**-24 * 3 * mag)


@pytest.mark.parametrize("op,ref", [("min", np.min), ("max", np.max)])
def test_all_reduce_min_max_exact(cpus, rng, op, ref):
    xs = [rng.standard_normal(777) for _ in range(3)]
    arrays = [cpus.asarray(x, device=i) for i, x in enumerate(xs)]
    accel.all_reduce(arrays, op).result()
    for a in arrays:
        assert np.array_equal(a.numpy(), ref(np.stack(xs), axis=0))


def test_broadcast_and_all_gather(cpus, rng):
    xs = [rng.standard_normal(100).astype(np.float32) for _ in range(3)]
    arrays = [cpus.asarray(x, device=i) for i, x in enumerate(xs)]
    accel.broadcast(arrays, root=2).result()
    for a in arrays:
        assert np.array_equal(a.numpy(), xs[2])
    sends = [cpus.asarray(x, device=i) for i, x in enumerate(xs)]
    recvs = [cpus.empty(300, device=i) for i in range(3)]
    assert accel.all_gather(sends, recvs).result() == recvs
    for r in recvs:
        assert np.array_equal(r.numpy(), np.concatenate(xs))


def test_collectives_refuse_bad_arguments(cpus):
    a, b = cpus.zeros(10, device=0), cpus.zeros(10, device=1)
    with pytest.raises(ValueError):
        accel.all_reduce([a, cpus.zeros(10)])  # no device named
    with pytest.raises(ValueError):
        accel.all_reduce([a, b], "mean")
    with pytest.raises(accel.AccelError) as e:
        accel.all_reduce([a, b], devices=[0, 0])  # one device twice
    assert e.value.name == "EINVAL"
    with pytest.raises(accel.AccelError) as e:
        accel.all_reduce([a, cpus.zeros(11, device=1)])  # lengths differ
    assert e.value.name == "EINVAL"
