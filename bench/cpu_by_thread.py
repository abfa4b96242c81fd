#!/usr/bin/env python3
"""Runs one command and prints one JSON line: the CPU-seconds (user + system) its process spent,
summed by thread name (ctrbox names its threads: docs/pipeline.md, "Thread names"), read from
/proc/PID/task/*/stat every 0.5 s until it exits (a thread's last reading counts, so a thread
that ends between two readings loses at most 0.5 s). The command's stdout goes to OUT.json,
its stderr to OUT.err; with a ctrbox train report there, its examples_per_s and digest come too.
Beside the CPU-seconds, the seconds each thread name spent runnable but waiting for a core
(/proc/PID/task/TID/schedstat's second field: the run-queue delay), which says whether a stage
that reports itself busy was computing or waiting its turn on the CPU.
Lighter than a profile (bench/profile_by_thread.py): no sampling, only the split by thread.

  bench/cpu_by_thread.py OUT -- build/ctrbox train --fresh --model-dir M --set ...
"""
import collections, json, os, subprocess, sys, time


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    out, cmd = sys.argv[1], sys.argv[3:]
    with open(out + ".json", "w") as so, open(out + ".err", "w") as se:
        p = subprocess.Popen(cmd, stdout=so, stderr=se)
        tick = os.sysconf("SC_CLK_TCK")
        last = {}  # tid -> (name, CPU-seconds, run-queue seconds)
        while p.poll() is None:
            try:
                tids = os.listdir(f"/proc/{p.pid}/task")
            except OSError:
                tids = []
            for t in tids:
                try:
                    with open(f"/proc/{p.pid}/task/{t}/stat") as f:
                        s = f.read()
                except OSError:
                    continue  # it ended
                try:
                    with open(f"/proc/{p.pid}/task/{t}/schedstat") as f:
                        waited = int(f.read().split()[1]) / 1e9
                except (OSError, IndexError, ValueError):
                    waited = 0.0  # ended, or a kernel without schedstat
                name = s[s.index("(") + 1:s.rindex(")")]
                fields = s[s.rindex(")") + 2:].split()
                last[t] = (name, (int(fields[11]) + int(fields[12])) / tick, waited)
            time.sleep(0.5)
    by_name, waited_by_name = collections.Counter(), collections.Counter()
    for name, seconds, waited in last.values():
        by_name[name] += seconds
        waited_by_name[name] += waited
    line = {"command": cmd, "exit_status": p.returncode, "cpu_seconds": round(sum(by_name.values()), 1),
            "cpu_seconds_by_thread_name": {k: round(v, 1) for k, v in by_name.most_common()},
            "runqueue_seconds_by_thread_name": {k: round(waited_by_name[k], 1) for k, _ in by_name.most_common()}}
    try:
        report = json.loads(open(out + ".json").read().strip().splitlines()[-1])
        line.update({k: report[k] for k in ("examples_per_s", "digest", "stages") if k in report})
    except (ValueError, IndexError):
        pass
    print(json.dumps(line))


if __name__ == "__main__":
    main()
