#!/usr/bin/env python3
"""The input pipeline's speed on its own (docs/pipeline.md, "Dry runs"): `ctrbox train --set
train.dry_run=true` on the benchmark's 1 M rows as shards, the stages one after the other
(pipeline.enabled=false), every pool of T threads (data.reader_threads, pipeline.read/pull/
push_threads, train.threads), for each T of --threads. Prints one JSON line per run, then a
summary: the median feed rate per T, its ratio to 1 thread, and each stage's µs per example
per core.

The baseline in the same run: the way the host side was measured before dry runs existed,
read + pull + push busy time of a 1-thread sequential *training* run (--baseline-ctrbox: the
binary of the commit to compare with; default this one).

  bench/feed_rate.py [--threads 1,2] [--reps 3] [--device cpu|gpu] [--baseline-ctrbox PATH]
      [--compare-ctrbox PATH]

--compare-ctrbox: another build's dry runs too, each right after this build's of the same
thread count (an A/B on a noisy machine); the summary adds their medians and this build's
ratio to them.

With --device gpu the dry run also plans and stages every pass (on a GPU, or in the host
emulation with --emulate) and drops it untrained.
"""
import json, os, statistics, subprocess

from bench_data import ROOT, arg_parser, train


def gen_shards(ctrbox, data_dir, rows):
    tsv = os.path.join(data_dir, f"feed_{rows}.tsv")
    out = os.path.join(data_dir, f"feed_{rows}_shards")
    os.makedirs(data_dir, exist_ok=True)
    if not os.path.exists(tsv):
        subprocess.run([ctrbox, "gen", "--format", "criteo", "--rows", str(rows), "--seed", "11",
                        "--out", tsv + ".tmp"], check=True, capture_output=True)
        os.rename(tsv + ".tmp", tsv)
    if not os.path.isdir(out):
        subprocess.run([ctrbox, "convert", "--data", tsv, "--out", out], check=True, capture_output=True)
    return out


def threads_args(t, read_pool=True):
    keys = ["train.threads", "data.reader_threads", "pipeline.pull_threads", "pipeline.push_threads"]
    if read_pool:  # (binaries before the read stage had a pool do not know the key)
        keys.append("pipeline.read_threads")
    return [x for k in keys for x in ("--set", f"{k}={t}")]


def main():
    ap = arg_parser(__doc__, reps=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--baseline-ctrbox", default="")
    ap.add_argument("--compare-ctrbox", default="")
    a = ap.parse_args()
    data = gen_shards(a.ctrbox, a.data_dir, a.rows)
    base = ["--format", "shards", "--data", data, "--fresh", "--set", "pipeline.enabled=false",
            "--model-dir", os.path.join(a.data_dir, "feed_model")]
    dev = ["--set", f"device={a.device}"] + (["--set", "gpu.emulate=true"] if a.emulate else [])
    threads = [int(t) for t in a.threads.split(",")]
    feed, busy, baseline, other = {}, {}, [], {}
    for rep in range(a.reps):
        b = train(a.baseline_ctrbox or a.ctrbox, base + threads_args(1, read_pool=not a.baseline_ctrbox))
        host = sum(b["stages"][s]["busy_seconds"] for s in ("read", "pull", "push"))
        baseline.append(b["examples"] / host)
        print(json.dumps({"bench": "feed_rate", "run": "baseline_train_1_thread", "rep": rep,
                          "ctrbox": a.baseline_ctrbox or a.ctrbox, "read_pull_push_seconds": host,
                          "examples_per_s": baseline[-1], "blas_core": b["blas_core"]}), flush=True)
        for t in threads:
            r = train(a.ctrbox, base + dev + threads_args(t) + ["--set", "train.dry_run=true"])
            feed.setdefault(t, []).append(r["examples_per_s"])
            busy.setdefault(t, []).append({s: r["stages"][s]["busy_seconds"] for s in r["stages"]})
            print(json.dumps({"bench": "feed_rate", "run": "dry_run", "threads": t, "rep": rep,
                              "device": a.device, "examples_per_s": r["examples_per_s"],
                              "seconds": r["seconds"], "stages": r["stages"],
                              "stage_split": r.get("stage_split"),
                              "blas_core": r["blas_core"]}), flush=True)
            if a.compare_ctrbox:
                c = train(a.compare_ctrbox, base + dev + threads_args(t) + ["--set", "train.dry_run=true"])
                other.setdefault(t, []).append(c["examples_per_s"])
                print(json.dumps({"bench": "feed_rate", "run": "compare_dry_run", "threads": t,
                                  "rep": rep, "ctrbox": a.compare_ctrbox,
                                  "examples_per_s": c["examples_per_s"], "seconds": c["seconds"],
                                  "stages": c["stages"], "blas_core": c["blas_core"]}), flush=True)
    med = {t: statistics.median(v) for t, v in feed.items()}
    base_med = statistics.median(baseline)
    us = {t: {s: round(1e6 * statistics.median(x[s] for x in busy[t]) * t / a.rows, 3)
              for s in ("read", "pull", "train", "push")} for t in threads}
    print(json.dumps({"bench": "feed_rate_summary", "rows": a.rows, "reps": a.reps, "device": a.device,
                      "cpus": os.cpu_count(), "feed_examples_per_s_median": med,
                      "baseline_read_pull_push_examples_per_s_median": base_med,
                      "ratio_1_thread_over_baseline": med.get(1, 0) / base_med,
                      "ratio_over_1_thread": {t: v / med[threads[0]] for t, v in med.items()},
                      "us_per_example_per_core": us,
                      **({"compare_ctrbox": a.compare_ctrbox,
                          "compare_examples_per_s_median": {t: statistics.median(v) for t, v in other.items()},
                          "ratio_over_compare": {t: med[t] / statistics.median(v) for t, v in other.items()}}
                         if other else {})}), flush=True)


if __name__ == "__main__":
    main()
