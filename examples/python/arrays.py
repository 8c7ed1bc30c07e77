"""numpy-style code on every device: the same expression on each device of a context (in-process,
or through acceld with a URL argument), checked against numpy.

    PYTHONPATH=clients/python ACCEL_LIBRARY=build/clients/libaccel.so \\
        python3 examples/python/arrays.py [URL]

Exit status 0 only if every device's answer matches numpy's within float32's tolerance."""
import sys

import numpy as np

import accel


def on(ctx, device, x, w, b):
    """A layer and a few reductions, with every op on `device`."""
    xs = ctx.asarray(x, device=device)
    ws = ctx.asarray(w, device=device)
    h = accel.matmul(xs, ws).result() + b          # a row broadcast over the batch
    h = accel.where(h > 0, h, h * 0.01).result()   # leaky ReLU: a comparison and where
    return h, accel.sum(h, axis=0), accel.max(h), accel.mean(h, axis=1)


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else None
    rng = np.random.default_rng()
    x = rng.standard_normal((256, 64), dtype=np.float32)
    w = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal(32, dtype=np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64) + b
    ref = np.where(ref > 0, ref, ref * 0.01)
    want = (ref, ref.sum(axis=0), ref.max(), ref.mean(axis=1))
    ok = True
    with accel.open(url) as ctx:
        for device in ctx.devices:
            got = on(ctx, device, x, w, b)
            err = max(float(np.max(np.abs(np.asarray(g, np.float64) - r))) / (1 + np.abs(r).max())
                      for g, r in zip(got, want))
            good = err < 1e-4
            ok = ok and good
            print(f"device {device.index} ({device.backend}, {device.name}): max relative "
                  f"error {err:.1e}, {'ok' if good else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
