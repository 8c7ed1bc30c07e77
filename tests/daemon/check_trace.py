#!/usr/bin/env python3
"""Checks a Chrome trace-event file written by accel (ACCEL_TRACE or `accelctl trace`).

usage: check_trace.py FILE [--client NAME] [--ops gemm,softmax,...]

It must parse as JSON; every op's async span must begin before it ends, with its "queued"
span nested inside; spans on one device queue's track must not overlap (each starts at or after
the previous one's end); the span of an op's work on a device must lie within the op's own
span; every device track must be named; the ops named by --ops must be there, and every op
span must name the client given by --client. Exit status 0 if all holds, else 1 with the
reasons."""
import collections
import json
import sys

EPS = 0.002  # microseconds: the file rounds timestamps to nanoseconds


def main(argv):
    path = argv[1]
    client = argv[argv.index("--client") + 1] if "--client" in argv else None
    want_ops = argv[argv.index("--ops") + 1].split(",") if "--ops" in argv else []
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
    for e in errors[:20]:
        print(f"{path}: {e}")
    print(f"{path}: {len(spans)} ops, {sum(len(v) for v in tracks.values())} spans on "
          f"{len(tracks)} tracks, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
