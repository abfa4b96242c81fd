#!/usr/bin/env python3
"""End-to-end cost of the SSD tier: the reference model trained all in memory and with
storage.memory_budget at a fraction (default 10 %) of the in-memory model (its bytes_live, the
encoded rows; --of table_memory: of the in-memory table's memory), same data, same
pass size, same machine. Checks that both give the same digest (the tiers are lossless) and
prints one JSON line per run and a summary with medians and the ratios (examples/s, peak RSS).
By default the job's own pass size (pipeline.pass_examples, 262144), which the budgeted run
cuts by memory (docs/storage.md, "Pass sizing"); --pass-examples N sets another.

  bench/tiered_e2e.py [--data-dir DIR] [--reps 3] [--fraction 0.1] [--of bytes_live]
      [--pass-examples N] [--set KEY=VALUE ...]

The data are shared/baselines/gen_criteo.py's 1 M training rows (seed 11) and 200 K test rows
(seed 12), generated into --data-dir if absent (as bench/e2e_vs_torch.py does).
"""
import argparse, json, os, shutil, statistics

from bench_data import ROOT, criteo_train_test, train


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--of", choices=["bytes_live", "table_memory"], default="bytes_live")
    ap.add_argument("--pass-examples", type=int, default=0, help="0: the job's default")
    ap.add_argument("--set", action="append", default=[], help="more job settings, both runs")
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    a = ap.parse_args()
    d = a.data_dir
    train_tsv, test_tsv = criteo_train_test(d)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh"]
    if a.pass_examples:
        common += ["--set", f"pipeline.pass_examples={a.pass_examples}"]
    for kv in a.set:
        common += ["--set", kv]
    ssd = os.path.join(d, "ssd")
    runs = {"memory": [], "ssd": []}
    budget = None
    for rep in range(a.reps):
        r = train(a.ctrbox, common + ["--model-dir", os.path.join(d, "model-mem")])
        runs["memory"].append(r)
        budget = budget or int(a.fraction * r["bytes_live" if a.of == "bytes_live" else "table_memory_bytes"])
        print(json.dumps({"bench": "tiered_e2e", "tier": "memory", "rep": rep, "examples_per_s": r["examples_per_s"],
                          "test_auc": r["test_auc"], "digest": r["digest"], "peak_rss_bytes": r["peak_rss_bytes"],
                          "table_memory_bytes": r["table_memory_bytes"], "stages": r["stages"]}), flush=True)
        shutil.rmtree(ssd, ignore_errors=True)
        r = train(a.ctrbox, common + ["--model-dir", os.path.join(d, "model-ssd"), "--set", f"storage.ssd_dir={ssd}",
                                      "--set", f"storage.memory_budget={budget}"])
        runs["ssd"].append(r)
        st = r["storage"]
        print(json.dumps({"bench": "tiered_e2e", "tier": "ssd", "rep": rep, "memory_budget": budget,
                          "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"], "digest": r["digest"],
                          "peak_rss_bytes": r["peak_rss_bytes"], "hit_rate": st["hit_rate"],
                          "peak_memory_bytes": st["peak_memory_bytes"],
                          "ssd_bytes_read_per_pushed_key": st["ssd_bytes_read"] / max(1, st["pulled_keys"]),
                          "ssd_bytes_written_per_pushed_key": st["ssd_bytes_written"] / max(1, st["pulled_keys"]),
                          "write_amplification": st["write_amplification"],
                          "ssd_bytes_written": st["ssd_bytes_written"], "compaction_bytes": st["compaction_bytes"],
                          "groups_written": st["groups_written"], "new_deltas": st.get("new_deltas", 0),
                          "merges": st.get("merges", 0),
                          "bloom_prunes": st["bloom_prunes"], "records_read": st["records_read"],
                          "memory_by_owner": st["memory_by_owner"],
                          "memory_peak_by_owner": r["memory_peak_by_owner"],
                          "pass_sizing": r["pass_sizing"], "stages": r["stages"]}), flush=True)
    med = {k: statistics.median(x["examples_per_s"] for x in v) for k, v in runs.items()}
    digests = {x["digest"] for v in runs.values() for x in v}
    print(json.dumps({"bench": "tiered_e2e_summary", "memory_budget": budget, "fraction": a.fraction, "of": a.of,
                      "settings": a.set,
                      "pass_examples": a.pass_examples, "reps": a.reps, "examples_per_s_median": med,
                      "ratio_ssd_over_memory": med["ssd"] / med["memory"],
                      "peak_rss_median": {k: statistics.median(x["peak_rss_bytes"] for x in v) for k, v in runs.items()},
                      "blas_core": runs["memory"][0]["blas_core"],
                      "same_digest": len(digests) == 1,
                      "hit_rate_median": statistics.median(x["storage"]["hit_rate"] for x in runs["ssd"]),
                      "peak_memory_over_budget_max": max(x["storage"]["peak_memory_bytes"] for x in runs["ssd"]) / budget}))


if __name__ == "__main__":
    main()
