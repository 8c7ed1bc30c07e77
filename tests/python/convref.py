"""An independent reference of astype (accel_convert's rules) in numpy: float64 values rounded
once to each float dtype by rint on a power-of-two scaling, integers exact in int64."""
import numpy as np

import accel

# (bits after the point, the lowest normal exponent, the largest finite value)
FLOAT = {"float32": (23, -126, float(np.finfo(np.float32).max)),
         "float16": (10, -14, 65504.0),
         "bfloat16": (7, -126, float.fromhex("0x1.fep127"))}
INT_RANGE = {"int32": (-2.0**31, 2.0**31 - 1), "uint32": (0.0, 2.0**32 - 1)}
STORE = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
         "int32": np.int32, "uint32": np.uint32, "bool": np.bool_}
EVERY = ["float32", "float64", "float16", "bfloat16", "int32", "uint32", "bool"]


def round_to(v, name):
    """float64 v rounded once to nearest even in float dtype `name`, as float64."""
    mant, emin, top = FLOAT[name]
    v = np.asarray(v, np.float64)
    finite = np.isfinite(v) & (v != 0)
    e = np.where(finite, np.frexp(np.where(finite, v, 1.0))[1] - 1, 0)
    q = np.ldexp(1.0, np.maximum(e, emin) - mant)
    r = np.where(finite, np.rint(v / q) * q, v)
    return np.where(np.abs(r) > top, np.copysign(np.inf, v), r)


def convert(v, src, dst):
    """Values v (float64, exact: what an array of dtype `src` holds) converted to `dst`: the
    numpy array accel's numpy() gives (bfloat16 as its bits)."""
    v = np.asarray(v, np.float64)
    ints = src in ("int32", "uint32", "bool")
    if dst == "bool":
        return v != 0
    if dst in INT_RANGE:
        if ints:  # modulo 2^32
            return v.astype(np.int64).astype(np.uint32).view(STORE[dst]).reshape(v.shape)
        lo, hi = INT_RANGE[dst]
        t = np.where(np.isnan(v), 0.0, np.clip(np.trunc(np.nan_to_num(v, nan=0.0)), lo, hi))
        return t.astype(np.int64).astype(STORE[dst])
    if dst == "float64":
        return v
    r = round_to(v, dst)
    if dst == "bfloat16":
        return accel.to_bfloat16(r.astype(np.float32))  # exact: r is a bfloat16 value
    return r.astype(STORE[dst])


def values_of(arr, name):
    """The float64 values numpy array `arr` of accel dtype `name` holds (bfloat16 bits)."""
    if name == "bfloat16":
        return accel.from_bfloat16(arr).astype(np.float64)
    return np.asarray(arr).astype(np.float64)


def make(ctx, rng, shape, name, wild=True):
    """A random accel array of dtype `name` and the float64 values it holds: floats with
    specials planted where `wild` (NaN, infinities, -0.0, halves, the integer limits)."""
    if name in ("int32", "uint32"):
        bits = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
        host = bits.view(STORE[name]).reshape(shape)
    elif name == "bool":
        host = rng.random(shape) < 0.5
    else:
        x = rng.uniform(-1e3, 1e3, shape)
        if wild:
            specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.5, -0.5, 2.5, -0.99,
                                 2.0**31, -2.0**31 - 4096, 2.0**32, 5e9, 65520.0, 1e-30])
            pick = rng.random(shape) < 0.2
            x = np.where(pick, specials[rng.integers(0, len(specials), shape)], x)
        if name == "bfloat16":
            host = accel.to_bfloat16(x)
        else:
            with np.errstate(over="ignore"):
                host = np.asarray(x).astype(STORE[name])
    arr = ctx.asarray(host, dtype=accel.bfloat16 if name == "bfloat16" else None)
    return arr, values_of(host, name)


def same(got, want, name):
    """Whether two numpy results of dtype `name` are equal (NaN equal to NaN; bfloat16 and
    floats by value, -0.0 apart from 0.0)."""
    if name in ("int32", "uint32", "bool"):
        return got.shape == want.shape and np.array_equal(got, want)
    g, w = values_of(got, name), values_of(want, name)
    return g.shape == w.shape and bool(np.all(((g == w) & (np.signbit(g) == np.signbit(w)))
                                              | (np.isnan(g) & np.isnan(w))))
