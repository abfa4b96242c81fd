#!/usr/bin/env python3
"""Two ctrbox binaries compared on the tiered_e2e job, their runs interleaved (A ssd, A memory,
B ssd, B memory, then again), so that a noisy shared machine slows both alike: back-to-back
runs of one binary on the 2-core VMs differed by up to 15 %. Prints one JSON line per run and
a summary with the medians, the ratios and whether every run trained to the same digest.

  bench/ab_e2e.py --a build/ctrbox --b /tmp/ctrbox-old [--reps 3] [--budget BYTES]
      [--data-dir DIR] [--set KEY=VALUE ...]

The data are bench/tiered_e2e.py's (1 M gen_criteo training rows, 200 K test rows). The budget
defaults to 10 % of the in-memory model's bytes_live, from a first in-memory run of A.
"""
import argparse, json, os, shutil, statistics

from bench_data import ROOT, criteo_train_test, train


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default=os.path.join(ROOT, "build", "ctrbox"))
    ap.add_argument("--b", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=int, default=0, help="0: 10 %% of the in-memory bytes_live")
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--set", action="append", default=[], help="more job settings, every run")
    a = ap.parse_args()
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh"]
    for kv in a.set:
        common += ["--set", kv]
    budget = a.budget
    if not budget:
        r = train(a.a, common + ["--model-dir", os.path.join(a.data_dir, "ab-model")])
        budget = int(0.1 * r["bytes_live"])
    runs = {}
    for rep in range(a.reps):
        for name, binary in (("a", a.a), ("b", a.b)):
            for tier in ("ssd", "memory"):
                ssd = os.path.join(a.data_dir, "ab-ssd")
                shutil.rmtree(ssd, ignore_errors=True)
                extra = ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}"] if tier == "ssd" else []
                r = train(binary, common + ["--model-dir", os.path.join(a.data_dir, "ab-model")] + extra)
                runs.setdefault((name, tier), []).append(r)
                line = {"bench": "ab_e2e", "binary": name, "path": binary, "tier": tier, "rep": rep,
                        "examples_per_s": r["examples_per_s"], "digest": r["digest"], "test_auc": r["test_auc"],
                        "peak_rss_bytes": r["peak_rss_bytes"]}
                if tier == "ssd":
                    line["hit_rate"] = r["storage"]["hit_rate"]
                    line["memory_budget"] = budget
                print(json.dumps(line), flush=True)
    med = {f"{n}_{t}": statistics.median(r["examples_per_s"] for r in rs) for (n, t), rs in runs.items()}
    digests = {r["digest"] for rs in runs.values() for r in rs}
    blas = {r.get("blas_core") for rs in runs.values() for r in rs}
    print(json.dumps({"bench": "ab_e2e_summary", "a": a.a, "b": a.b, "reps": a.reps, "memory_budget": budget,
                      "settings": a.set, "examples_per_s_median": med,
                      "ssd_a_over_b": med["a_ssd"] / med["b_ssd"], "memory_a_over_b": med["a_memory"] / med["b_memory"],
                      "ratio_ssd_over_memory": {"a": med["a_ssd"] / med["a_memory"], "b": med["b_ssd"] / med["b_memory"]},
                      "same_digest": len(digests) == 1, "blas_core": sorted(b for b in blas if b)}), flush=True)


if __name__ == "__main__":
    main()
