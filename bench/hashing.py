#!/usr/bin/env python3
"""Lossless ids against hashed ones (HPS §2; docs/model.md, "Hashed keys"): the default model
on the 1 M / 200 K benchmark files, trained with every distinct key (the baseline, in the same
run) and with the keys hashed into 1/2, 1/4, 1/16 and 1/64 of the lossless run's keys, by
modulo hashing (K keys) and by OP+OSRP (2K keys). Prints one JSON line per run — distinct
keys, model bytes (bytes_live), test AUC and its change from lossless, examples/s — and a
summary table.

  bench/hashing.py [--ratios 2,4,16,64] [--data-dir /tmp/ctrbox-bench]
"""
import json, os

from bench_data import arg_parser, criteo_train_test, train


def main():
    ap = arg_parser(__doc__, reps=1)
    ap.add_argument("--ratios", default="2,4,16,64")
    a = ap.parse_args()
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh",
              "--model-dir", os.path.join(a.data_dir, "model-hashing")]
    rows = []

    def run(method, bins, ratio):
        extra = [] if method == "none" else ["--set", "features.hashing.method=" + method,
                                             "--set", "features.hashing.bins=%d" % bins]
        r = train(a.ctrbox, common + extra)
        row = {"bench": "hashing", "method": method, "bins": bins, "target_ratio": ratio,
               "keys": r["keys"], "bytes_live": r["bytes_live"], "test_auc": r["test_auc"],
               "examples_per_s": r["examples_per_s"], "blas_core": r["blas_core"]}
        rows.append(row)
        return row

    base = run("none", 0, 1)
    print(json.dumps(base), flush=True)
    for ratio in (int(x) for x in a.ratios.split(",")):
        for method, bins in (("modulo", base["keys"] // ratio), ("op_osrp", base["keys"] // (2 * ratio))):
            row = run(method, bins, ratio)
            row["key_ratio"] = base["keys"] / row["keys"]
            row["bytes_ratio"] = base["bytes_live"] / row["bytes_live"]
            row["auc_delta"] = row["test_auc"] - base["test_auc"]
            print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "hashing_summary", "lossless_keys": base["keys"],
                      "lossless_bytes": base["bytes_live"], "lossless_auc": base["test_auc"],
                      "table": [[r["method"], r["bins"], r["keys"], r["bytes_live"], round(r["test_auc"], 5),
                                 round(r.get("auc_delta", 0.0), 5)] for r in rows]}), flush=True)


if __name__ == "__main__":
    main()
