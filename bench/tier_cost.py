#!/usr/bin/env python3
"""Where the 10 % budget's examples/s go: the tiered_e2e job (1 M / 200 K benchmark rows) run as
a ladder of configurations, each adding one cost of the out-of-core run to the in-memory run,
their runs interleaved per repetition so that a noisy shared machine slows all alike. Each run
reports examples/s and the CPU-seconds it used (user + system, from the child's rusage), so the
ladder splits the budgeted run's extra CPU into its parts:

  memory         the default job in memory (passes of up to 262 144 examples)
  memory_small   in memory, with passes of `--small-pass` examples (2 048: the 10 % run's passes
                 are one or two minibatches, cut by its key window)
  cache_only     the tiered table with a budget of `--cache-factor` x the in-memory bytes_live:
                 pass sizing, pins, slabs and the cache's bookkeeping, but nothing evicted
  budget         the budget at `--fraction` (10 %) of the in-memory bytes_live: the SSD tier
  memory_1t, budget_1t  the in-memory and budgeted runs with one trainer thread, which leaves
                 the other core to the tiers

  bench/tier_cost.py [--reps 3] [--fraction 0.1] [--data-dir DIR] [--ctrbox build/ctrbox]

Prints one JSON line per run, then a summary: examples/s and CPU-seconds medians per rung, each
rung's ratio to `memory`, the CPU-seconds each rung adds to the one before, and whether every
run trained to the same digest.
"""
import json, os, resource, shutil, statistics

from bench_data import arg_parser, criteo_train_test, train


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = arg_parser(__doc__, 3)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--cache-factor", type=float, default=2.0)
    ap.add_argument("--small-pass", type=int, default=2048)
    a = ap.parse_args()
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    model_dir = os.path.join(a.data_dir, "tier-cost-model")
    ssd = os.path.join(a.data_dir, "tier-cost-ssd")
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh", "--model-dir", model_dir]
    live = train(a.ctrbox, common)["bytes_live"]
    budget = int(a.fraction * live)
    cache = int(a.cache_factor * live)
    tiered = lambda b: ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={b}"]
    rungs = [
        ("memory", []),
        ("memory_small", ["--set", f"pipeline.pass_examples={a.small_pass}"]),
        ("cache_only", tiered(cache)),
        ("budget", tiered(budget)),
        ("memory_1t", ["--set", "train.threads=1"]),
        ("budget_1t", tiered(budget) + ["--set", "train.threads=1"]),
    ]
    runs = {}
    for rep in range(a.reps):
        for name, extra in rungs:
            shutil.rmtree(ssd, ignore_errors=True)
            before = cpu_seconds()
            r = train(a.ctrbox, common + extra)
            cpu = cpu_seconds() - before
            runs.setdefault(name, []).append((r, cpu))
            line = {"bench": "tier_cost", "rung": name, "rep": rep, "examples_per_s": r["examples_per_s"],
                    "cpu_seconds": round(cpu, 2), "seconds": r["seconds"], "passes": r["passes"],
                    "digest": r["digest"], "test_auc": r["test_auc"], "threads": r["threads"],
                    "blas_core": r.get("blas_core")}
            s = r.get("storage") or {}
            if "ssd_bytes_read" in s:
                line.update(memory_budget=s["memory_budget"], hit_rate=s["hit_rate"],
                            ssd_bytes_read=s["ssd_bytes_read"], ssd_bytes_written=s["ssd_bytes_written"],
                            records_read=s["records_read"], pulled_keys=s["pulled_keys"])
            print(json.dumps(line), flush=True)
    eps = {n: statistics.median(r["examples_per_s"] for r, _ in rs) for n, rs in runs.items()}
    cpu = {n: statistics.median(c for _, c in rs) for n, rs in runs.items()}
    order = ["memory", "memory_small", "cache_only", "budget"]
    added = {order[i]: round(cpu[order[i]] - cpu[order[i - 1]], 2) for i in range(1, len(order))}
    digests = {r["digest"] for rs in runs.values() for r, _ in rs}
    blas = {r.get("blas_core") for rs in runs.values() for r, _ in rs}
    print(json.dumps({"bench": "tier_cost_summary", "reps": a.reps, "bytes_live": live, "memory_budget": budget,
                      "cache_only_budget": cache, "examples_per_s_median": {n: round(v) for n, v in eps.items()},
                      "cpu_seconds_median": {n: round(v, 2) for n, v in cpu.items()},
                      "over_memory": {n: round(eps[n] / eps["memory"], 3) for n in eps},
                      "budget_1t_over_memory_1t": round(eps["budget_1t"] / eps["memory_1t"], 3),
                      "cpu_seconds_added": added, "same_digest": len(digests) == 1,
                      "blas_core": sorted(b for b in blas if b)}), flush=True)


if __name__ == "__main__":
    main()
