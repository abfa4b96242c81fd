#!/usr/bin/env python3
"""Where a ctrbox train job's CPU goes, by thread and symbol: the 12 M-key job of
bench/ab_settings.py (4 M generated rows of zipf 1.02, vocab_scale 1000) run once under
`perf record -F 299` (a sample ~3.3 ms of CPU), at the 10 % budget or in memory, and its samples
counted per thread name, and per symbol for the threads asked for (docs/storage.md's profile
figures: the tiers' threads `ctrbox-tier`, `ctrbox-evict`, `ctrbox-ssd-io`, the pull, the push).

  bench/profile_by_thread.py [--ctrbox build/ctrbox] [--in-memory] [--threads ctrbox-tier,ctrbox-evict]
      [--top 30] [--data-dir /tmp/ctrbox-bench] [--perf-data FILE (count an existing recording)]
      [--set KEY=VALUE ...]

Prints JSON lines: the run's report figures (examples/s, digest, hit rate, blas_core), the
samples per thread name, then the top symbols of the asked threads together. The samples are
counted from `perf script` (every sample with its thread name and symbol), not from `perf
report`'s filtered views, whose per-dso columns hid libc's and the kernel's symbols. Runs on one
machine are noisy (±5-10 %): compare a thread against one whose code did not change (the
generator's, `ctrbox-parse`) in the same runs, and quote ratios.
"""
import collections, json, os, re, shutil, subprocess, sys

from bench_data import arg_parser

JOB = ["data.gen.rows=4000000", "data.gen.test_rows=200000", "data.gen.zipf=1.02",
       "data.gen.vocab_scale=1000"]
BUDGET = ["storage.memory_budget=255829129"]
LINE = re.compile(r"\s*(\S+)\s+[0-9a-f]+\s+(.*?)\s*\(([^()]*)\)\s*$")


def count(perf_data):
    """(samples per thread name, Counter of (thread, symbol))."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    threads, symbols = collections.Counter(), collections.Counter()
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        comm, sym, _ = m.groups()
        threads[comm] += 1
        symbols[(comm, sym or "[unknown]")] += 1
    return threads, symbols


def main():
    ap = arg_parser(__doc__, 1)
    ap.add_argument("--in-memory", action="store_true", help="without the SSD tier and the budget")
    ap.add_argument("--threads", default="ctrbox-tier,ctrbox-evict",
                    help="thread names whose symbols are listed (comma-separated)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--perf-data", help="count this recording instead of running the job")
    ap.add_argument("--set", action="append", default=[], help="more settings of the job")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: linux-perf)")
    perf_data = a.perf_data
    if perf_data is None:
        os.makedirs(a.data_dir, exist_ok=True)
        perf_data = os.path.join(a.data_dir, "profile-by-thread.perf.data")
        ssd = os.path.join(a.data_dir, "profile-by-thread-ssd")
        model = os.path.join(a.data_dir, "profile-by-thread-model")
        shutil.rmtree(ssd, ignore_errors=True)
        args = [a.ctrbox, "train", "--model-dir", model, "--fresh",
                "--set", "train.progress_seconds=1e9"]
        if not a.in_memory:
            args += ["--set", f"storage.ssd_dir={ssd}"]
        for kv in JOB + ([] if a.in_memory else BUDGET) + a.set:
            args += ["--set", kv]
        p = subprocess.run(["perf", "record", "-F", "299", "-o", perf_data, "--"] + args,
                           capture_output=True, text=True)
        shutil.rmtree(ssd, ignore_errors=True)
        shutil.rmtree(model, ignore_errors=True)
        if p.returncode != 0:
            sys.exit(f"ctrbox train failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        st = r.get("storage", {})
        print(json.dumps({"bench": "profile_by_thread", "ctrbox": a.ctrbox, "set": a.set,
                          "tiered": not a.in_memory, "examples_per_s": r["examples_per_s"],
                          "digest": r["digest"], "blas_core": r.get("blas_core"),
                          "hit_rate": st.get("hit_rate", 1.0), "pulled_keys": st.get("pulled_keys"),
                          "passes": r.get("pass_sizing", {}).get("passes")}), flush=True)
    threads, symbols = count(perf_data)
    print(json.dumps({"samples": sum(threads.values()), "by_thread": dict(threads.most_common())}))
    asked = set(a.threads.split(","))
    merged = collections.Counter()
    for (comm, sym), n in symbols.items():
        if comm in asked:
            merged[sym] += n
    print(json.dumps({"threads": sorted(asked), "samples": sum(merged.values()),
                      "top_symbols": [[s, n] for s, n in merged.most_common(a.top)]}))


if __name__ == "__main__":
    main()
