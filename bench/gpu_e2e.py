#!/usr/bin/env python3
"""GPU end-to-end benchmark (docs/gpu.md): ctrbox with `device: gpu` against the PyTorch
reference with --device cuda, on the same GPU, files and model (embedding 16, MLP
512-256-128, batch 2048, sparse Adagrad 0.05, dense Adam 1e-3), --reps times each,
interleaved. Prints one JSON line per run (ctrbox's with its pipeline stage table) and a
summary with medians and ratios. Without a GPU it prints one line saying so and exits 0.

  bench/gpu_e2e.py [--data-dir DIR] [--reps 3] [--gemm fp32,tf32] [--threads N]

torch_ctr.py's examples/s times its training loop only (parsing, id mapping and the copy to
the GPU happen before its clock starts); ctrbox's is the whole pipelined train job: reading
the shards, pulling rows from the CPU table, training on the GPU and pushing back.
"""
import argparse, json, os, statistics, subprocess, sys

from bench_data import ROOT, SHARED, criteo_train_test, train

PY = "/usr/bin/python3"


def emit(obj):
    print(json.dumps(obj), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gemm", default="fp32,tf32")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    a = ap.parse_args()

    probe = subprocess.run([a.ctrbox, "train", "--set", "device=gpu", "--set", "data.gen.rows=2000",
                            "--set", "data.gen.test_rows=1000", "--model-dir",
                            os.path.join(a.data_dir, "probe"), "--fresh"], capture_output=True, text=True)
    if probe.returncode != 0:
        emit({"bench": "gpu_e2e", "skipped": probe.stderr.strip().splitlines()[-1]})
        return
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    shards = {}
    for src, name in [(train_tsv, "train_shards"), (test_tsv, "test_shards")]:
        shards[name] = os.path.join(a.data_dir, name)
        if not os.path.isdir(shards[name]):
            subprocess.run([a.ctrbox, "convert", "--data", src, "--out", shards[name]], check=True,
                           capture_output=True)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    results = {"pytorch-cuda": []}
    for rep in range(a.reps):
        p = subprocess.run([PY, os.path.join(SHARED, "torch_ctr.py"), "--train", train_tsv, "--test",
                            test_tsv, "--device", "cuda"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"torch_ctr.py failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        results["pytorch-cuda"].append((r["train_examples_per_s"], r["auc"]))
        emit({"bench": "gpu_e2e", "system": "pytorch-cuda", "rep": rep, "examples_per_s": r["train_examples_per_s"],
              "test_auc": r["auc"], "train_seconds": r["train_seconds"]})
        for gemm in a.gemm.split(","):
            name = f"ctrbox-gpu-{gemm}"
            r = train(a.ctrbox, ["--format", "shards", "--data", shards["train_shards"], "--eval-data",
                                 shards["test_shards"], "--model-dir", os.path.join(a.data_dir, "model-" + name),
                                 "--fresh", "--set", "device=gpu", "--set", f"gpu.gemm={gemm}",
                                 "--set", f"train.threads={a.threads}",
                                 "--set", f"data.reader_threads={a.threads}",
                                 "--set", f"pipeline.pull_threads={a.threads}"])
            results.setdefault(name, []).append((r["examples_per_s"], r["test_auc"]))
            emit({"bench": "gpu_e2e", "system": name, "rep": rep, "device": r["device"],
                  "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"], "seconds": r["seconds"],
                  "stages": r["stages"], "peak_rss_bytes": r["peak_rss_bytes"], "digest": r["digest"]})
    med = {k: statistics.median(x[0] for x in v) for k, v in results.items()}
    auc = {k: statistics.median(x[1] for x in v) for k, v in results.items()}
    emit({"bench": "gpu_e2e_summary", "gpu": gpu, "reps": a.reps, "examples_per_s_median": med,
          "test_auc_median": auc,
          "ratio_over_torch": {k: v / med["pytorch-cuda"] for k, v in med.items() if k != "pytorch-cuda"},
          "auc_delta": {k: v - auc["pytorch-cuda"] for k, v in auc.items() if k != "pytorch-cuda"}})


if __name__ == "__main__":
    main()
