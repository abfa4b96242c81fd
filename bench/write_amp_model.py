#!/usr/bin/env python3
"""A model of the SSD tier's write-back (bench/results/tiered_notes.md, "Write amplification"): rows written
per dirty row written back, for one group, under the current layout (a base and one delta,
merged once the delta would pass `delta_share` of the base) and under layouts with K deltas
per group (a new delta is written only when the newest is full; all are merged into the base
when K are in use).

The trace is what the benchmark at 10 % of the 1 M-row model measured: a group has B = 54 rows
on disk and a write brings d ~ 3 dirty rows, one of them a hot row that is in most writes. It
is a model, not a measurement: it leaves out compaction and the cache's dynamics, and it
prints the write-back's rows per dirty row for each layout.

  bench/write_amp_model.py [--rows 54] [--hot 2] [--cold 2] [--writes 20000]
"""
import argparse
import json
import random


def trace(writes, rows, hot, cold, seed=1):
    r = random.Random(seed)
    return [set(r.sample(range(hot), 1)) | set(r.sample(range(hot, rows), cold)) for _ in range(writes)]


def one_delta(tr, rows, share):
    delta, written, dirty = set(), 0, 0
    for x in tr:
        dirty += len(x)
        carried = len(delta - x)
        if carried + len(x) > share * rows:  # merge: the group is rewritten as a new base
            written += rows
            delta = set()
        else:  # a new delta: the old one's rows the write does not replace, and the write's
            written += carried + len(x)
            delta |= x
    return written / dirty


def k_deltas(tr, rows, share, k):
    older, newest, written, dirty = 0, set(), 0, 0
    for x in tr:
        dirty += len(x)
        if len(newest | x) <= share * rows:  # the newest delta grows (its rows carried)
            written += len(newest - x) + len(x)
            newest |= x
        elif older < k - 1:  # the newest is full: a new delta of this write's rows only
            older += 1
            newest = set(x)
            written += len(x)
        else:  # every delta in use: all merge into a new base
            written += rows
            older, newest = 0, set()
    return written / dirty


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=54)
    ap.add_argument("--hot", type=int, default=2)
    ap.add_argument("--cold", type=int, default=2)
    ap.add_argument("--writes", type=int, default=20000)
    a = ap.parse_args()
    tr = trace(a.writes, a.rows, a.hot, a.cold)
    shares = (0.05, 0.1, 0.15, 0.2, 1 / 3, 0.5)
    best = min((one_delta(tr, a.rows, s), s) for s in shares)
    print(json.dumps({"layout": "base + 1 delta", "rows_written_per_dirty_row": round(best[0], 2),
                      "delta_share": round(best[1], 3),
                      "by_share": {f"{s:.3f}": round(one_delta(tr, a.rows, s), 2) for s in shares}}))
    for k in (2, 3, 4, 6, 8):
        best = min((k_deltas(tr, a.rows, s, k), s) for s in shares)
        print(json.dumps({"layout": f"base + {k} deltas", "rows_written_per_dirty_row": round(best[0], 2),
                          "delta_share": round(best[1], 3)}))


if __name__ == "__main__":
    main()
