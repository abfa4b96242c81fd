#!/usr/bin/env python3
"""End-to-end benchmark: ctrbox against the PyTorch reference on the same machine and files.

Generates the issue's data with shared/baselines/gen_criteo.py (1 M training rows, seed 11;
200 K test rows, seed 12), converts them to shards, then runs, --reps times each:
  * shared/baselines/torch_ctr.py --threads T  (times its training loop only: parsing and id
    mapping happen before its clock starts)
  * ctrbox train from the TSV file (parsing included in its seconds)
  * ctrbox train from binary shards
each evaluated on the test rows. Prints one JSON line per run and one summary line per BLAS
setting with medians and ratios. BLAS settings: "env" (the environment as it is, e.g. this
machine's OPENBLAS_CORETYPE=Haswell) and "auto" (OPENBLAS_CORETYPE unset: OpenBLAS picks its
kernels from the CPU); both systems run under the same setting.

  bench/e2e_vs_torch.py [--data-dir DIR] [--reps 3] [--blas env,auto] [--threads 2]
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "baselines")
PY = "/usr/bin/python3"  # Debian's, with python3-numpy and python3-torch


def run(cmd, env, what):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    lines = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    out["_wall"] = time.time() - t0
    return out


def emit(obj):
    print(json.dumps(obj), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--blas", default="env,auto")
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    ap.add_argument("--baselines", default=SHARED)
    a = ap.parse_args()

    d = a.data_dir
    os.makedirs(d, exist_ok=True)
    train, test = os.path.join(d, "train.tsv"), os.path.join(d, "test.tsv")
    gen = os.path.join(a.baselines, "gen_criteo.py")
    for path, rows, seed in [(train, a.rows, 11), (test, a.test_rows, 12)]:
        if not os.path.exists(path):
            subprocess.run([PY, gen, "--rows", str(rows), "--seed", str(seed), "--out", path,
                            "--oracle", path + ".oracle.json"], check=True)
    oracle = json.load(open(test + ".oracle.json"))["oracle_auc"]
    base_env = dict(os.environ)
    for src, dst in [(train, "train_shards"), (test, "test_shards")]:
        out = os.path.join(d, dst)
        if not os.path.isdir(out):
            r = run([a.ctrbox, "convert", "--data", src, "--out", out, "--set", "data.reader_threads=2"],
                    base_env, "convert")
            emit({"bench": "convert", "input": os.path.basename(src), **{k: r[k] for k in ("rows", "bytes_out", "seconds")}})

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    for mode in a.blas.split(","):
        env = dict(base_env)
        if mode == "auto":
            env.pop("OPENBLAS_CORETYPE", None)
        coretype = env.get("OPENBLAS_CORETYPE", "(auto)")
        results = {"pytorch": [], "ctrbox-tsv": [], "ctrbox-shards": []}
        for rep in range(a.reps):
            r = run([PY, os.path.join(a.baselines, "torch_ctr.py"), "--train", train, "--test", test,
                     "--threads", str(a.threads)], env, "torch_ctr.py")
            results["pytorch"].append((r["train_examples_per_s"], r["auc"], r))
            emit({"bench": "e2e", "system": "pytorch", "blas": mode, "openblas_coretype": coretype, "rep": rep,
                  "examples_per_s": r["train_examples_per_s"], "test_auc": r["auc"],
                  "train_seconds": r["train_seconds"], "wall_seconds": round(r["_wall"], 2)})
            for name, args in [("ctrbox-tsv", ["--data", train, "--eval-data", test]),
                               ("ctrbox-shards", ["--format", "shards", "--data", os.path.join(d, "train_shards"),
                                                  "--eval-data", os.path.join(d, "test_shards")])]:
                r = run([a.ctrbox, "train", *args, "--model-dir", os.path.join(d, "model-" + name), "--fresh",
                         "--set", f"train.threads={a.threads}", "--set", "train.progress_seconds=1e9"],
                        env, name)
                results[name].append((r["examples_per_s"], r["test_auc"], r))
                emit({"bench": "e2e", "system": name, "blas": mode, "blas_core": r["blas_core"], "rep": rep,
                      "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"],
                      "seconds": r["seconds"], "peak_rss_bytes": r["peak_rss_bytes"],
                      "keys": r["keys"], "table_memory_bytes": r["table_memory_bytes"],
                      "stages": r["stages"], "digest": r["digest"]})
        med = {k: statistics.median(x[0] for x in v) for k, v in results.items()}
        auc = {k: statistics.median(x[1] for x in v) for k, v in results.items()}
        emit({"bench": "e2e_summary", "blas": mode, "openblas_coretype": coretype, "cpu": cpu,
              "threads": a.threads, "reps": a.reps, "train_rows": a.rows, "test_rows": a.test_rows,
              "examples_per_s_median": med, "test_auc_median": auc, "oracle_auc": oracle,
              "ratio_tsv_over_torch": med["ctrbox-tsv"] / med["pytorch"],
              "ratio_shards_over_torch": med["ctrbox-shards"] / med["pytorch"],
              "auc_delta_tsv": auc["ctrbox-tsv"] - auc["pytorch"],
              "auc_delta_shards": auc["ctrbox-shards"] - auc["pytorch"]})


if __name__ == "__main__":
    main()
