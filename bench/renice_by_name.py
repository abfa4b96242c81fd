#!/usr/bin/env python3
"""Runs one command and, while it runs, sets the nice value of its threads by thread name
(ctrbox names its threads: docs/pipeline.md, "Threads"): each thread whose name is given gets
that value once, when first seen (the threads are looked for every 0.3 s). Exits with the
command's status. A probe of which stage's priority sets a job's pace, before building one into
the code (docs/storage.md, "Priorities by stage": the `nice_probe` lines of
bench/results/tier_gap_2026-12-07.jsonl). Raising a thread's priority (a value below its own)
needs CAP_SYS_NICE (root).

  bench/renice_by_name.py ctrbox-pull=0 ctrbox-ssd-io=0 -- build/ctrbox train --fresh ...
"""
import os, subprocess, sys, time


def main():
    if "--" not in sys.argv[1:]:
        sys.exit(__doc__)
    sep = sys.argv.index("--")
    want = {}
    for kv in sys.argv[1:sep]:
        name, _, value = kv.partition("=")
        try:
            want[name] = int(value)
        except ValueError:
            sys.exit(f"renice_by_name.py: {kv!r} is not NAME=NICE")
    p = subprocess.Popen(sys.argv[sep + 1:])
    done = set()
    while p.poll() is None:
        try:
            tids = os.listdir(f"/proc/{p.pid}/task")
        except OSError:
            break
        for t in tids:
            if t in done:
                continue
            try:
                with open(f"/proc/{p.pid}/task/{t}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue  # it ended
            if name in want:
                try:
                    os.setpriority(os.PRIO_PROCESS, int(t), want[name])
                except ProcessLookupError:
                    pass  # it ended
                except PermissionError as e:
                    sys.exit(f"renice_by_name.py: thread {t} ({name}) to nice {want[name]}: {e}")
                done.add(t)
        time.sleep(0.3)
    sys.exit(p.wait())


if __name__ == "__main__":
    main()
