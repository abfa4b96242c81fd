#!/usr/bin/env python3
"""The default batch sized from the data (docs/model.md, "Defaults that fit the data"):
`ctrbox gen` Criteo-like training sets of several sizes (seed 11) and one test set of 50 000
rows (seed 12); each trained with train.batch_size left to the rule and with the old default
2048 beside it, runs interleaved. Prints one JSON line per run (batch, test AUC and logloss,
examples/s, seconds) and per size a summary with medians and the AUC difference.

    bench/batch_defaults.py [--sizes 8000,50000,200000,1000000] [--reps 3] [--data-dir DIR]
"""
import json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402


gen = bench_data.ctrbox_gen


def main():
    ap = bench_data.arg_parser(__doc__, reps=3)
    ap.add_argument("--sizes", default="8000,50000,200000,1000000")
    a = ap.parse_args()
    os.makedirs(a.data_dir, exist_ok=True)
    test = gen(a.ctrbox, os.path.join(a.data_dir, "batch_test_50k.tsv"), 50_000, 12)
    for rows in (int(s) for s in a.sizes.split(",")):
        train = gen(a.ctrbox, os.path.join(a.data_dir, f"batch_train_{rows}.tsv"), rows, 11)
        runs = {"sized": [], "2048": []}
        for rep in range(a.reps):
            for name, extra in (("sized", []), ("2048", ["--set", "train.batch_size=2048"])):
                r = bench_data.train(a.ctrbox, ["--data", train, "--eval-data", test, *extra])
                line = {"bench": "batch_defaults", "rows": rows, "run": name, "rep": rep,
                        "batch_size": r["batch_size"], "test_auc": r["test_auc"],
                        "test_logloss": r["test_logloss"], "examples_per_s": r["examples_per_s"],
                        "seconds": r["seconds"], "blas_core": r["blas_core"]}
                runs[name].append(line)
                print(json.dumps(line), flush=True)
        med = {n: {k: statistics.median(x[k] for x in v)
                   for k in ("test_auc", "test_logloss", "examples_per_s", "seconds")}
               for n, v in runs.items()}
        print(json.dumps({"bench": "batch_defaults", "summary": True, "rows": rows,
                          "sized_batch": runs["sized"][0]["batch_size"], "median": med,
                          "auc_gain": med["sized"]["test_auc"] - med["2048"]["test_auc"],
                          "speed_ratio": med["sized"]["examples_per_s"] /
                          med["2048"]["examples_per_s"]}), flush=True)


if __name__ == "__main__":
    main()
