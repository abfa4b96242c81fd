#!/usr/bin/env python3
"""Bytes per key and test AUC of each sparse row layout: the reference model trained on the
benchmark data (gen_criteo.py 1 M training rows, seed 11; 200 K test rows, seed 12) with
each sparse optimizer state layout and embedding width, all in memory, same machine:

  adagrad / float32 (the default: dim state floats per row), adagrad / 16-bit codes,
  rowwise_adagrad / float32 (one state float per row), rowwise_adagrad / 16-bit codes
  (stochastic and nearest rounding), and adagrad with its state stored as bfloat16
  (optimizer.sparse.state_bits=16; "bf16-state"), alone and with 16-bit codes; and
  per-slot dimensions (model.slot_dims, bench/architectures.py's SLOT_DIMS) with the default
  row and with row-wise Adagrad and 16-bit codes.

Prints one JSON line per run (value and table bytes per key, test AUC and its difference
from the default layout, examples/s) and a summary with medians over --reps and the ratios
of bytes per key to the default's float32 row.

  bench/row_layouts.py [--data-dir DIR] [--reps 1] [--layouts NAME,...]
"""
import json, os, statistics

from architectures import SLOT_DIMS
from bench_data import arg_parser, criteo_train_test, train

LAYOUTS = [
    ("adagrad/float32", []),
    ("adagrad/StocQ-16", ["--set", "storage.quant.bits=16"]),
    ("rowwise_adagrad/float32", ["--set", "optimizer.sparse.type=rowwise_adagrad"]),
    ("rowwise_adagrad/StocQ-16", ["--set", "optimizer.sparse.type=rowwise_adagrad",
                                  "--set", "storage.quant.bits=16"]),
    ("rowwise_adagrad/FixQ-16", ["--set", "optimizer.sparse.type=rowwise_adagrad",
                                 "--set", "storage.quant.bits=16", "--set", "storage.quant.rounding=nearest"]),
    ("adagrad/float32/bf16-state", ["--set", "optimizer.sparse.state_bits=16"]),
    ("adagrad/StocQ-16/bf16-state", ["--set", "optimizer.sparse.state_bits=16",
                                     "--set", "storage.quant.bits=16"]),
    ("slot_dims/adagrad/float32", ["--set", "model.slot_dims=" + SLOT_DIMS]),
    ("slot_dims/rowwise_adagrad/StocQ-16", ["--set", "model.slot_dims=" + SLOT_DIMS,
                                            "--set", "optimizer.sparse.type=rowwise_adagrad",
                                            "--set", "storage.quant.bits=16"]),
]


def main():
    ap = arg_parser(__doc__, reps=1)
    ap.add_argument("--layouts", default="", help="these layouts only (the default is always run)")
    a = ap.parse_args()
    chosen = [n for n in a.layouts.split(",") if n]
    layouts = [(n, x) for n, x in LAYOUTS if not chosen or n in chosen or n == "adagrad/float32"]
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh",
              "--model-dir", os.path.join(a.data_dir, "model-layouts")]
    runs = {name: [] for name, _ in layouts}
    for rep in range(a.reps):  # repetitions interleaved: drift hits every layout alike
        for name, args in layouts:
            r = train(a.ctrbox, common + args)
            runs[name].append(r)
            print(json.dumps({"bench": "row_layouts", "run": name, "rep": rep,
                              "value_bytes_per_key": r["value_bytes_per_key"],
                              "table_bytes_per_key": r["table_bytes_per_key"],
                              "test_auc": r["test_auc"], "test_logloss": r["test_logloss"],
                              "examples_per_s": r["examples_per_s"], "blas_core": r["blas_core"]}), flush=True)
    base = runs["adagrad/float32"]
    base_auc = statistics.median(r["test_auc"] for r in base)
    base_bytes = base[0]["value_bytes_per_key"]
    summary = {}
    for name, rs in runs.items():
        auc = statistics.median(r["test_auc"] for r in rs)
        summary[name] = {"value_bytes_per_key": rs[0]["value_bytes_per_key"],
                         "bytes_ratio_to_default": rs[0]["value_bytes_per_key"] / base_bytes,
                         "table_bytes_per_key": rs[0]["table_bytes_per_key"],
                         "test_auc_median": auc, "test_auc_minus_default": auc - base_auc,
                         "examples_per_s_median": statistics.median(r["examples_per_s"] for r in rs)}
    print(json.dumps({"bench": "row_layouts_summary", "reps": a.reps, "blas_core": base[0]["blas_core"],
                      "layouts": summary}))


if __name__ == "__main__":
    main()
