#!/usr/bin/env python3
"""The CPU trainer across thread counts: `device: cpu` on generated rows (the default model),
every pool of T threads, for each T of --threads, --reps times interleaved. Prints one JSON line
per run and a summary with the median examples/s per T and its ratio to the first T (the
issue's figure: 16 threads against 2 on a 16-core GPU host). The BLAS kernels are ctrbox's
choice unless OPENBLAS_CORETYPE is set (each line says which: blas_core, blas_core_chosen_by).

  bench/cpu_scaling.py [--threads 2,16] [--rows 200000] [--reps 3]
"""
import json, statistics

from bench_data import arg_parser, train


def main():
    ap = arg_parser(__doc__, reps=3)
    ap.add_argument("--threads", default="2,16")
    ap.add_argument("--rows", type=int, default=200_000)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    got = {}
    for rep in range(a.reps):
        for t in threads:
            sets = [x for k in ["train.threads", "data.reader_threads", "pipeline.read_threads",
                                "pipeline.pull_threads", "pipeline.push_threads"]
                    for x in ("--set", f"{k}={t}")]
            r = train(a.ctrbox, ["--set", f"data.gen.rows={a.rows}", "--set", "data.gen.test_rows=10000",
                                 "--fresh", "--model-dir", f"{a.data_dir}/cpu_scaling"] + sets)
            got.setdefault(t, []).append(r["examples_per_s"])
            print(json.dumps({"bench": "cpu_scaling", "threads": t, "rep": rep,
                              "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"],
                              "stages": r["stages"], "blas_core": r["blas_core"],
                              "blas_core_chosen_by": r.get("blas_core_chosen_by")}), flush=True)
    med = {t: statistics.median(v) for t, v in got.items()}
    print(json.dumps({"bench": "cpu_scaling_summary", "rows": a.rows, "reps": a.reps,
                      "examples_per_s_median": med,
                      "ratio_over_first": {t: v / med[threads[0]] for t, v in med.items()}}), flush=True)


if __name__ == "__main__":
    main()
