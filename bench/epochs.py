#!/usr/bin/env python3
"""Per-epoch validation and early stopping (docs/model.md, "Validation and early stopping"):
one epoch on every row, one epoch with 10 % held back, and `train.epochs: auto`, on data of
several kinds, test logloss and AUC on held-out rows of the same source. Prints one JSON line
per run and per case a summary.

Cases: `ctrbox gen` Criteo-like rows (long-tailed ids: one epoch fits them); an additive
logistic model over 10 one-hot fields of 50 ids each in libFM's format (every id seen often),
at the batch sized from the data and at batch 1024 (few steps an epoch: one epoch underfits).

    bench/epochs.py [--reps 1] [--data-dir DIR]
"""
import json, math, os, random, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402


def additive(path, rows, ids, seed):
    """label idx:1 per field; the click's logit is -1 + 0.5 * the sum of the ids' weights."""
    if os.path.exists(path):
        return path
    wr = random.Random(99)
    weights = [[wr.gauss(0, 1) for _ in range(ids)] for _ in range(10)]
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            row = [r.randrange(ids) for _ in range(10)]
            z = -1.0 + 0.5 * sum(weights[k][row[k]] for k in range(10))
            label = "1" if r.random() < 1 / (1 + math.exp(-z)) else "-1"
            f.write(label + "".join(f" {ids * k + row[k]}:1" for k in range(10)) + "\n")
    return path


gen = bench_data.ctrbox_gen


def main():
    a = bench_data.arg_parser(__doc__, reps=1).parse_args()
    os.makedirs(a.data_dir, exist_ok=True)
    d = a.data_dir
    libfm = ["--format", "libfm", "--set", "data.slot_from=position"]
    cases = [
        ("generated 8000", ["--data", gen(a.ctrbox, f"{d}/ep_gen_8k.tsv", 8000, 11),
                            "--eval-data", gen(a.ctrbox, f"{d}/ep_gen_test.tsv", 20000, 12)]),
        ("additive 8000", libfm + ["--data", additive(f"{d}/ep_add_8k.libfm", 8000, 50, 1),
                                   "--eval-data", additive(f"{d}/ep_add_test.libfm", 5000, 50, 2)]),
        ("additive 30000", libfm + ["--data", additive(f"{d}/ep_add_30k.libfm", 30000, 50, 1),
                                    "--eval-data", additive(f"{d}/ep_add_test.libfm", 5000, 50, 2)]),
        ("additive 8000, batch 1024",
         libfm + ["--data", additive(f"{d}/ep_add_8k.libfm", 8000, 50, 1),
                  "--eval-data", additive(f"{d}/ep_add_test.libfm", 5000, 50, 2),
                  "--set", "train.batch_size=1024"]),
    ]
    runs = [("1 epoch", []), ("1 epoch, 10 % held back", ["--set", "train.validation_fraction=0.1"]),
            ("auto", ["--set", "train.epochs=auto"])]
    for case, args in cases:
        got = {}
        for rep in range(a.reps):
            for name, extra in runs:
                r = bench_data.train(a.ctrbox, [*args, *extra])
                v = r.get("validation", {})
                line = {"bench": "epochs", "case": case, "run": name, "rep": rep,
                        "test_logloss": r["test_logloss"], "test_auc": r["test_auc"],
                        "epochs": r["epochs"], "kept": v.get("best_epoch"),
                        "seconds": r["seconds"], "batch_size": r["batch_size"],
                        "blas_core": r["blas_core"]}
                got.setdefault(name, []).append(line)
                print(json.dumps(line), flush=True)
        med = {n: {k: statistics.median(l[k] for l in ls) for k in ("test_logloss", "test_auc", "seconds")}
               for n, ls in got.items()}
        print(json.dumps({"bench": "epochs", "case": case, "summary": med,
                          "auto_minus_one_epoch_logloss":
                              med["auto"]["test_logloss"] - med["1 epoch"]["test_logloss"]}), flush=True)


if __name__ == "__main__":
    main()
