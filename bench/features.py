#!/usr/bin/env python3
"""Feature extraction inside the pipeline (docs/features.md), against its two baselines, on the
views of `ctrbox gen --format views` (1 M train + 200 K test impressions by default):

  hidden    train -c job.yaml (extraction as a stage) vs train on the same rows already
            extracted to shards: examples/s, ratio (target >= 0.9x).
  e2e       raw views to a trained model: train -c job.yaml, wall time, vs the two-step path
            `ctrbox extract` to shards then `ctrbox train` on them (target: >= 3x faster).
  per_core  extraction throughput on one core: the extract stage's busy time with one reader
            thread vs the same graph in pandas (bench/features_pandas.py, timed from raw files
            to feature values), and a check that both made the same keys on the first rows.
  pandas_two_step
            the two-step path a pandas user has: the pandas extraction's time plus training
            on extracted rows.

Every figure is the median of --reps runs; one JSON line per comparison, with blas_core.

    bench/features.py [--data-dir /tmp/ctrbox-bench] [--reps 3] [--rows 1000000]
"""
import json, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402

PY = "/usr/bin/python3"  # Debian's, with pandas, numpy and xxhash


def run(cmd, timed=False):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])}... failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return (out, wall) if timed else out


def main():
    ap = bench_data.arg_parser(__doc__, 3)
    ap.add_argument("--rows", type=int, default=1000000)
    a = ap.parse_args()
    views = os.path.join(a.data_dir, f"views-{a.rows}")
    if not os.path.exists(os.path.join(views, "job.yaml")):
        run([a.ctrbox, "gen", "--format", "views", "--rows", str(a.rows), "--test-rows",
             str(a.rows // 5), "--out", views])
    oracle = json.load(open(os.path.join(views, "oracle.json")))["oracle_auc"]
    # The job without its held-out evaluation: the timed paths train only.
    with open(os.path.join(views, "job.yaml")) as f:
        yaml = "".join(l for l in f if "eval_paths" not in l)
    job = os.path.join(a.data_dir, "views-job.yaml")
    with open(job, "w") as f:
        f.write(yaml)
    shards = os.path.join(a.data_dir, "views-shards")
    model = os.path.join(a.data_dir, "views-model")
    test = os.path.join(views, "impressions_test.csv")
    common = ["--model-dir", model, "--fresh", "--set", "train.progress_seconds=1e9"]

    in_pipe, two_step, extracts, shard_trains = [], [], [], []
    for _ in range(a.reps):
        r, wall = run([a.ctrbox, "train", "-c", job, *common], timed=True)
        in_pipe.append((r, wall))
        shutil.rmtree(shards, ignore_errors=True)
        e, ewall = run([a.ctrbox, "extract", "-c", job, "--out", shards], timed=True)
        extracts.append((e, ewall))
        t, twall = run([a.ctrbox, "train", "--format", "shards", "--data", shards, *common],
                       timed=True)
        shard_trains.append((t, twall))
        two_step.append(ewall + twall)
        if r["digest"] != t["digest"]:
            sys.exit(f"the extract stage and the extracted shards trained different models: "
                     f"{r['digest']} vs {t['digest']}")
    # Test AUC of the last model (both paths train the same one), on the held-out views.
    ev = run([a.ctrbox, "eval", "-c", job, "--model-dir", model, "--data", test])
    r = in_pipe[-1][0]
    med = statistics.median
    eps_pipe = med(x["examples_per_s"] for x, _ in in_pipe)
    eps_shards = med(x["examples_per_s"] for x, _ in shard_trains)
    base = {"bench": "features", "rows": a.rows, "cores": os.cpu_count(),
            "blas_core": r["blas_core"], "reps": a.reps, "examples": r["examples"],
            "test_auc": ev["auc"], "oracle_auc": oracle}
    x = r["extract"]
    print(json.dumps({**base, "comparison": "hidden",
                      "examples_per_s_in_pipeline": eps_pipe,
                      "examples_per_s_on_shards": eps_shards,
                      "ratio": eps_pipe / eps_shards,
                      "extract_busy_seconds": x["busy_seconds"],
                      "train_seconds": r["seconds"],
                      "stages_in_pipeline": r["stages"]}))
    wall_pipe = med(w for _, w in in_pipe)
    print(json.dumps({**base, "comparison": "e2e",
                      "seconds_in_pipeline": wall_pipe,
                      "seconds_two_step": med(two_step),
                      "seconds_extract_to_disk": med(w for _, w in extracts),
                      "seconds_train_on_shards": med(w for _, w in shard_trains),
                      "shard_bytes": extracts[-1][0]["bytes_out"],
                      "speedup": med(two_step) / wall_pipe}))

    # One core: the extract stage with one reader thread (its busy time: parse, graph,
    # assemble), and the pandas graph; then the same keys on the first rows.
    one = []
    text = os.path.join(a.data_dir, "views-extracted.tsv")
    for _ in range(a.reps):
        e = run([a.ctrbox, "extract", "-c", job, "--text", text,
                 "--set", "data.reader_threads=1"])
        one.append(e["extract"])
    pandas = []
    check = None
    for i in range(a.reps):
        cmd = [PY, os.path.join(os.path.dirname(__file__), "features_pandas.py"), views]
        if i == 0:
            cmd += ["--check", text, "--rows", "20000"]
        p = run(cmd)
        if i == 0:
            check = (p["compared_rows"], p["mismatched_rows"])
        pandas.append(p)
    rows_in = one[-1]["rows_in"]
    ctr_rps = med(rows_in / e["busy_seconds"] for e in one)
    pd_rps = med(rows_in / p["seconds"] for p in pandas)
    print(json.dumps({**base, "comparison": "per_core",
                      "rows_in": rows_in,
                      "ctrbox_rows_per_s": ctr_rps,
                      "ctrbox_parse_graph_assemble_seconds": [
                          med(e[k] for e in one)
                          for k in ("parse_seconds", "graph_seconds", "assemble_seconds")],
                      "pandas_rows_per_s": pd_rps,
                      "pandas_seconds": med(p["seconds"] for p in pandas),
                      "pandas": pandas[0]["pandas"],
                      "ratio": ctr_rps / pd_rps,
                      "checked_rows": check[0], "mismatched_rows": check[1]}))
    pandas_two_step = med(p["seconds"] for p in pandas) + med(w for _, w in shard_trains)
    print(json.dumps({**base, "comparison": "pandas_two_step",
                      "seconds_in_pipeline": wall_pipe,
                      "seconds_pandas_then_train": pandas_two_step,
                      "speedup": pandas_two_step / wall_pipe,
                      "note": "pandas time to feature values (not written to disk) plus "
                              "ctrbox training on the extracted shards"}))


if __name__ == "__main__":
    main()
