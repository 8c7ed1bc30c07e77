#!/usr/bin/env python3
"""Checks a Chrome trace-event file written by accel (ACCEL_TRACE or `accelctl trace`).

usage: check_trace.py FILE [--client NAME] [--ops gemm,softmax,...] [--shards N]

It must parse as JSON; every op's async span must begin before it ends, with its "queued"
span nested inside; spans on one device queue's track must not overlap (each starts at or after
the previous one's end); the span of an op's work on a device must lie within the op's own
span; every device track must be named; the ops named by --ops must be there, and every op
span must name the client given by --client; with --shards N (acceld's shards, a world each),
ops of every shard 0..N-1 must be there, each op id must begin once (the shards' ids kept
apart), and each shard's devices must be processes of their own named "..., shard k". Exit status 0 if all holds, else 1 with the
reasons."""
import collections
import json
import sys

EPS = 0.002  # microseconds: the file rounds timestamps to nanoseconds


def check_shards(events, procs, shards):
    """Every shard's ops there, each op id begun once, each shard's device tracks its own."""
    errors = []
    begins = collections.Counter(e["id"] for e in events
                                 if e["ph"] == "b" and e["name"] != "queued")
    errors += [f"op id {i} begins {n} times" for i, n in begins.items() if n > 1]
    seen = {e["args"].get("shard") for e in events if e["ph"] in "bX" and "args" in e}
    for k in range(shards):
        if k not in seen:
            errors.append(f"no op of shard {k} (saw shards {sorted(seen, key=str)})")
        if not any(name.endswith(f", shard {k}") for name in procs.values()):
            errors.append(f"no device process of shard {k} (saw {sorted(procs.values())})")
    for e in events:
        if e["ph"] == "X" and not procs.get(e["pid"], "").endswith(f", shard {e['args']['shard']}"):
            errors.append(f"span of shard {e['args']['shard']} on {procs.get(e['pid'])!r}")
    return errors


def main(argv):
    path = argv[1]
    client = argv[argv.index("--client") + 1] if "--client" in argv else None
    want_ops = argv[argv.index("--ops") + 1].split(",") if "--ops" in argv else []
    shards = int(argv[argv.index("--shards") + 1]) if "--shards" in argv else 0
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    errors = []
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    spans = collections.defaultdict(dict)  # op id -> {"op": [b, e], "queued": [b, e]}
    for e in events:
        if e["ph"] in "be":
            which = "queued" if e["name"] == "queued" else "op"
            s = spans[e["id"]].setdefault(which, [None, None, None])
            s[0 if e["ph"] == "b" else 1] = e["ts"]
            if which == "op":
                s[2] = e
    for op_id, s in spans.items():
        b, e, ev = s.get("op", [None, None, None])
        if b is None or e is None:
            errors.append(f"op {op_id}: begin {b}, end {e}")
            continue
        if b > e + EPS:
            errors.append(f"op {op_id}: ends at {e} before it begins at {b}")
        if client is not None and ev["args"]["client"] != client:
            errors.append(f"op {op_id}: client {ev['args']['client']!r}, not {client!r}")
        if "queued" in s:
            qb, qe, _ = s["queued"]
            if qb is None or qe is None or qb < b - EPS or qe > e + EPS or qb > qe + EPS:
                errors.append(f"op {op_id}: queued [{qb}, {qe}] not within [{b}, {e}]")
    tracks = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
            op = e["args"]["op"]
            if op and op in spans and "op" in spans[op]:
                b, end, _ = spans[op]["op"]
                if e["ts"] < b - EPS or e["ts"] + e["dur"] > end + EPS:
                    errors.append(f"op {op}: work [{e['ts']}, {e['ts'] + e['dur']}] outside "
                                  f"its span [{b}, {end}]")
    for key, spans_on in tracks.items():
        if key not in names or key[0] not in procs:
            errors.append(f"track {key} has no name")
        spans_on.sort(key=lambda e: e["ts"])
        for prev, cur in zip(spans_on, spans_on[1:]):
            if cur["ts"] < prev["ts"] + prev["dur"] - EPS:
                errors.append(f"track {names.get(key)}: {cur['name']} at {cur['ts']} overlaps "
                              f"{prev['name']} ending {prev['ts'] + prev['dur']}")
    seen = {e["name"] for e in events if e["ph"] == "X"}
    for op in want_ops:
        if op not in seen:
            errors.append(f"no span of {op} on any device (saw {sorted(seen)})")
    if not tracks:
        errors.append("no device work at all")
    if shards:
        errors += check_shards(events, procs, shards)
    for e in errors[:20]:
        print(f"{path}: {e}")
    print(f"{path}: {len(spans)} ops, {sum(len(v) for v in tracks.values())} spans on "
          f"{len(tracks)} tracks, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
