#!/usr/bin/env python3
"""The overlapped pipeline against the sequential one (pipeline.enabled=false), all in
memory and with storage.memory_budget at a fraction (default 10 %) of the in-memory table:
same data, same pass size, same machine, deterministic digests compared. Prints one JSON line
per run and a summary with medians and ratios:

  - pipelined / sequential examples/s, in memory and over the SSD tier;
  - SSD-tier pipelined / in-memory pipelined examples/s (issue target: >= 0.90);
  - steady state: per pass (first two and last left out), the pass time (push to push) over
    the busiest stage's busy time (target: <= 1.1), median over passes;
  - the AIBox Table 1 view: each stage's busy time as a share of the run.

  bench/pipeline_bench.py [--data-dir DIR] [--reps 3] [--fraction 0.1] [--pass-examples 8192]

The data are shared/baselines/gen_criteo.py's 1 M training rows (seed 11) and 200 K test rows
(seed 12), generated into --data-dir if absent (as bench/e2e_vs_torch.py does).
"""
import argparse, json, os, shutil, statistics, subprocess, sys

from bench_data import ROOT, criteo_train_test
STAGES = ("read", "pull", "train", "push")


def train(ctrbox, args, metrics):
    if os.path.exists(metrics):
        os.remove(metrics)
    p = subprocess.run([ctrbox, "train", *args, "--set", "train.progress_seconds=1e9",
                        "--set", f"train.metrics_path={metrics}"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"ctrbox train failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    passes = [json.loads(l) for l in open(metrics) if '"event":"pass"' in l.replace(" ", "")]
    steady = passes[2:-1] or passes
    ratios = [p["seconds"] / max(p["stages"][s]["busy_seconds"] for s in STAGES) for p in steady]
    r["_pass_over_busiest"] = statistics.median(ratios)
    r["_busiest"] = statistics.mode(max(STAGES, key=lambda s: p["stages"][s]["busy_seconds"]) for p in steady)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--pass-examples", type=int, default=8192)
    ap.add_argument("--queue-depth", type=int, default=1)
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    ap.add_argument("--modes", default="memory,ssd")
    a = ap.parse_args()
    d = a.data_dir
    train_tsv, test_tsv = criteo_train_test(d)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh", "--set", "train.deterministic=true",
              "--set", f"pipeline.pass_examples={a.pass_examples}", "--set", f"pipeline.queue_depth={a.queue_depth}"]
    ssd = os.path.join(d, "ssd-pipe")
    metrics = os.path.join(d, "pipeline_bench_metrics.jsonl")
    runs = {}
    budget = None
    modes = a.modes.split(",")
    for rep in range(a.reps):
        for tier in modes:
            for pipelined in (False, True):
                args = common + ["--model-dir", os.path.join(d, f"model-pipe-{tier}"),
                                 "--set", f"pipeline.enabled={'true' if pipelined else 'false'}"]
                if tier == "ssd":
                    if budget is None:
                        sys.exit("--modes must list memory before ssd (the budget is a fraction of it)")
                    shutil.rmtree(ssd, ignore_errors=True)
                    args += ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}"]
                r = train(a.ctrbox, args, metrics)
                if tier == "memory" and budget is None:
                    budget = int(a.fraction * r["table_memory_bytes"])
                key = f"{tier}-{'pipelined' if pipelined else 'sequential'}"
                runs.setdefault(key, []).append(r)
                line = {"bench": "pipeline", "tier": tier, "pipelined": pipelined, "rep": rep,
                        "examples_per_s": r["examples_per_s"], "seconds": r["seconds"], "test_auc": r["test_auc"],
                        "digest": r["digest"], "passes": r["passes"], "pass_examples": a.pass_examples,
                        "pass_over_busiest_median": r["_pass_over_busiest"], "busiest_stage": r["_busiest"],
                        "stage_busy_share": {s: r["stages"][s]["busy_seconds"] / r["seconds"] for s in STAGES},
                        "stages": r["stages"], "peak_rss_bytes": r["peak_rss_bytes"],
                        "rows_from_passes_in_flight": r["rows_from_passes_in_flight"]}
                if tier == "ssd":
                    line.update({"memory_budget": budget, "hit_rate": r["storage"]["hit_rate"],
                                 "peak_memory_bytes": r["storage"]["peak_memory_bytes"]})
                print(json.dumps(line), flush=True)
    med = {k: statistics.median(x["examples_per_s"] for x in v) for k, v in runs.items()}
    summary = {"bench": "pipeline_summary", "reps": a.reps, "pass_examples": a.pass_examples,
               "queue_depth": a.queue_depth, "examples_per_s_median": med,
               "pass_over_busiest_median": {k: statistics.median(x["_pass_over_busiest"] for x in v)
                                            for k, v in runs.items()},
               "same_digest": len({x["digest"] for v in runs.values() for x in v}) == 1}
    for tier in modes:
        summary[f"{tier}_pipelined_over_sequential"] = med[f"{tier}-pipelined"] / med[f"{tier}-sequential"]
    if "ssd" in modes:
        summary["memory_budget"] = budget
        summary["fraction"] = a.fraction
        summary["ssd_pipelined_over_memory_pipelined"] = med["ssd-pipelined"] / med["memory-pipelined"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
