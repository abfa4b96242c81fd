#!/usr/bin/env python3
"""GPU end-to-end benchmark (docs/gpu.md): ctrbox with `device: gpu` against the PyTorch
reference with --device cuda, on the same GPU, files and model (embedding 16, MLP
512-256-128, batch 2048, sparse Adagrad 0.05, dense Adam 1e-3), --reps times each,
interleaved; then ctrbox under a 10 % memory budget (the SSD tier) against its in-memory run.
Prints one JSON line per run (ctrbox's with its stage table and the GPU's phase split) and a
summary with medians and ratios. Without a GPU it prints one line saying so and exits 0.

  bench/gpu_e2e.py [--data-dir DIR] [--reps 3] [--gemm fp32,tf32] [--budget 0.1] [--no-call-by-call]
                   [--scale-rows 4000000]

Runs on a bare CUDA machine: the baselines come from CTRBOX_BASELINES (or ../shared/baselines),
PyTorch from the python3 running this script (or Debian's), the data from `ctrbox gen`.
torch_ctr.py's examples/s times its training loop only (parsing, id mapping and the copy to
the GPU happen before its clock starts); ctrbox's is the whole pipelined train job: reading
the shards, pulling rows from the CPU table, training on the GPU and pushing back.
"""
import argparse, json, os, statistics, subprocess, sys

from bench_data import ROOT, SHARED, baseline_python, clean_env, train


def emit(obj):
    print(json.dumps(obj), flush=True)


def gen(ctrbox, path, rows, seed):
    if not os.path.exists(path):
        subprocess.run([ctrbox, "gen", "--format", "criteo", "--rows", str(rows), "--seed", str(seed),
                        "--out", path + ".tmp"], check=True, capture_output=True)
        os.rename(path + ".tmp", path)
    return path


def try_train(ctrbox, args, name):
    """train(), but a failed job is a JSON line with its error, not the end of the benchmark: a
    short time on a GPU machine still measures the other runs."""
    try:
        return train(ctrbox, args)
    except SystemExit as e:
        emit({"bench": "gpu_e2e", "system": name, "failed": str(e)[-2500:]})
        return None


def shards(ctrbox, tsv, out):
    if not os.path.isdir(out):
        subprocess.run([ctrbox, "convert", "--data", tsv, "--out", out], check=True, capture_output=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench-gpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--gemm", default="fp32,tf32")
    ap.add_argument("--budget", type=float, default=0.1, help="memory budget as a share of the model (0: skip)")
    ap.add_argument("--budget-reps", type=int, default=2)
    ap.add_argument("--scale-rows", type=int, default=0,
                    help="then the tiers at scale: this many generated rows of a 12 M-key shape "
                         "(zipf 1.02, vocab_scale 1000; 4000000 as budget_10pct_4m.jsonl), in "
                         "memory and at --budget of it, one run each (0: skip)")
    ap.add_argument("--no-call-by-call", action="store_true",
                    help="skip the fp32 run with gpu.replay=false (the step launched call by call)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--emulate", action="store_true",
                    help="every ctrbox job with gpu.emulate=true: checks this script where there is no GPU "
                         "(slow; use small --rows and --scale-rows, with --no-torch)")
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    a = ap.parse_args()
    os.makedirs(a.data_dir, exist_ok=True)
    a.emu = ["--set", "gpu.emulate=true"] if a.emulate else []

    # The probe launches the step call by call: a replay that fails is then a failed run below,
    # not "no GPU".
    probe = subprocess.run([a.ctrbox, "train", "--set", "device=gpu", "--set", "gpu.replay=false",
                            "--set", "data.gen.rows=2000",
                            "--set", "data.gen.test_rows=1000", "--model-dir",
                            os.path.join(a.data_dir, "probe"), "--fresh"] + a.emu, capture_output=True, text=True)
    if probe.returncode != 0:
        emit({"bench": "gpu_e2e", "skipped": probe.stderr.strip().splitlines()[-1]})
        return
    train_tsv = gen(a.ctrbox, os.path.join(a.data_dir, "train.tsv"), a.rows, 11)
    test_tsv = gen(a.ctrbox, os.path.join(a.data_dir, "test.tsv"), a.test_rows, 12)
    train_sh = shards(a.ctrbox, train_tsv, os.path.join(a.data_dir, "train_shards"))
    test_sh = shards(a.ctrbox, test_tsv, os.path.join(a.data_dir, "test_shards"))
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        gpu = "emulated" if a.emulate else "unknown"
    py = baseline_python("torch")
    common = ["--format", "shards", "--data", train_sh, "--eval-data", test_sh, "--fresh", "--set", "device=gpu"] + a.emu
    results, runs = {}, {}
    for rep in range(a.reps):
        if not a.no_torch:
            p = subprocess.run([py, os.path.join(SHARED, "torch_ctr.py"), "--train", train_tsv, "--test",
                                test_tsv, "--device", "cuda"], capture_output=True, text=True,
                               env=clean_env())
            if p.returncode != 0:
                sys.exit(f"torch_ctr.py failed:\n{p.stderr[-3000:]}")
            r = json.loads(p.stdout.strip().splitlines()[-1])
            results.setdefault("pytorch-cuda", []).append((r["train_examples_per_s"], r["auc"]))
            emit({"bench": "gpu_e2e", "system": "pytorch-cuda", "rep": rep, "python": py,
                  "examples_per_s": r["train_examples_per_s"], "test_auc": r["auc"],
                  "train_seconds": r["train_seconds"]})
        variants = [(f"ctrbox-gpu-{g}", ["--set", f"gpu.gemm={g}"]) for g in a.gemm.split(",")]
        if not a.no_call_by_call:  # before the replayed step: the same job launched call by call
            variants.append(("ctrbox-gpu-fp32-call-by-call",
                             ["--set", "gpu.gemm=fp32", "--set", "gpu.replay=false"]))
        for name, flags in variants:
            r = try_train(a.ctrbox, common + ["--model-dir", os.path.join(a.data_dir, "model-" + name)] + flags,
                          name)
            if r is None:
                continue
            results.setdefault(name, []).append((r["examples_per_s"], r["test_auc"]))
            runs.setdefault(name, []).append(r)
            emit({"bench": "gpu_e2e", "system": name, "rep": rep, "device": r["device"],
                  "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"], "seconds": r["seconds"],
                  "stages": r["stages"], "stage_split": r.get("stage_split"), "gpu": r.get("gpu"),
                  "peak_rss_bytes": r["peak_rss_bytes"],
                  "digest": r["digest"], "blas_core": r["blas_core"]})
    summary = {"bench": "gpu_e2e_summary", "gpu": gpu, "reps": a.reps}
    med = {k: statistics.median(x[0] for x in v) for k, v in results.items()}
    auc = {k: statistics.median(x[1] for x in v) for k, v in results.items()}
    summary["examples_per_s_median"] = med
    summary["test_auc_median"] = auc
    if "pytorch-cuda" in med:
        summary["ratio_over_torch"] = {k: v / med["pytorch-cuda"] for k, v in med.items() if k != "pytorch-cuda"}
        summary["auc_delta"] = {k: v - auc["pytorch-cuda"] for k, v in auc.items() if k != "pytorch-cuda"}
    summary["train_stage_examples_per_gpu_s_median"] = {
        k: statistics.median((r.get("gpu") or {}).get("examples_per_gpu_second", 0.0) for r in v)
        for k, v in runs.items()}
    summary["train_stage_busy_share_median"] = {
        k: statistics.median(r["stages"]["train"]["busy_seconds"] / r["seconds"] for r in v)
        for k, v in runs.items()}
    summary["gpu_busy_share_median"] = {
        k: statistics.median((r.get("gpu") or {}).get("gpu_busy_share", 0.0) for r in v) for k, v in runs.items()}
    if "ctrbox-gpu-fp32" in runs and "ctrbox-gpu-fp32-call-by-call" in runs:
        # The replayed step runs the same kernels in the same order: the same model, bit for bit.
        summary["replay_same_digest"] = all(
            r["digest"] == runs["ctrbox-gpu-fp32"][0]["digest"]
            for r in runs["ctrbox-gpu-fp32-call-by-call"])
        summary["replay_speedup"] = med["ctrbox-gpu-fp32"] / med["ctrbox-gpu-fp32-call-by-call"]
    # The budget and scale runs replay the step; if no replayed run succeeded, they launch it call
    # by call, and say so ("replay": false).
    base, extra = "ctrbox-gpu-fp32", []
    if base not in runs and "ctrbox-gpu-fp32-call-by-call" in runs:
        base, extra = "ctrbox-gpu-fp32-call-by-call", ["--set", "gpu.replay=false"]
    if a.budget > 0 and base in runs:
        mem = runs[base]
        budget = int(a.budget * mem[0]["table_memory_bytes"])
        got = []
        for rep in range(a.budget_reps):
            ssd = os.path.join(a.data_dir, "ssd")
            r = try_train(a.ctrbox, common + extra + ["--model-dir", os.path.join(a.data_dir, "model-budget"),
                                                      "--set", "gpu.gemm=fp32", "--set", f"storage.ssd_dir={ssd}",
                                                      "--set", f"storage.memory_budget={budget}"],
                          "ctrbox-gpu-fp32-budget")
            if r is None:
                continue
            got.append(r)
            emit({"bench": "gpu_e2e", "system": "ctrbox-gpu-fp32-budget", "rep": rep, "budget_bytes": budget,
                  "replay": not extra, "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"],
                  "passes": r["passes"], "hit_rate": r["storage"]["hit_rate"], "stages": r["stages"],
                  "stage_split": r.get("stage_split"), "gpu": r.get("gpu"),
                  "digest": r["digest"]})
        b = statistics.median(r["examples_per_s"] for r in got) if got else 0.0
        summary["budget"] = {"share": a.budget, "bytes": budget, "replay": not extra,
                             "examples_per_s_median": b, "ratio_over_in_memory": b / med[base],
                             "same_digest": bool(got) and all(r["digest"] == mem[0]["digest"] for r in got)}
    if a.scale_rows > 0 and a.budget > 0 and base in runs:
        summary["scale"] = scale(a, extra)
    emit(summary)


def scale(a, extra):
    """The tiers where a budget means something: a generated 12 M-key model (at 4 M rows) on the
    GPU in memory, then at a.budget of its bytes over the SSD tier, with the pass memory's
    default and off; the same digest. Each run's line is printed when it ends (a deadline may
    cut the rest)."""
    gen = ["--fresh", "--set", "device=gpu", "--set", f"data.gen.rows={a.scale_rows}",
           "--set", "data.gen.test_rows=200000", "--set", "data.gen.zipf=1.02",
           "--set", "data.gen.vocab_scale=1000"] + a.emu + extra
    runs = {}

    def one(name, args, budget):
        r = try_train(a.ctrbox, gen + args, "scale-" + name)
        if r is None:
            return None
        runs[name] = r
        emit({"bench": "gpu_e2e_scale", "run": name, "rows": a.scale_rows, "budget_bytes": budget,
              "replay": not extra, "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"],
              "keys": r.get("keys"), "bytes_live": r["bytes_live"], "passes": r["passes"],
              "hit_rate": r.get("storage", {}).get("hit_rate"), "stages": r["stages"],
              "stage_split": r.get("stage_split"), "gpu": r.get("gpu"),
              "peak_rss_bytes": r["peak_rss_bytes"], "digest": r["digest"]})
        return r

    mem = one("memory", ["--model-dir", os.path.join(a.data_dir, "model-scale")], 0)
    if mem is None:
        return {"rows": a.scale_rows, "failed": "the in-memory run"}
    budget = int(a.budget * mem["bytes_live"])
    ssd = os.path.join(a.data_dir, "ssd-scale")
    # The pass memory's default (max(64 MB, budget / 4), for the host's RAM) cuts a 10 % pass
    # to one minibatch (bench/results/budget_10pct_4m.jsonl: 1 953 passes of 2 048 rows), and
    # a GPU pays each pass's staging and synchronizations; off, the budget's pinned share
    # sizes the passes (320 there). Which a GPU job should default to is this pair's answer.
    one("budget_pass_memory_off", ["--model-dir", os.path.join(a.data_dir, "model-scale-c"),
                                   "--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}",
                                   "--set", "pipeline.pass_memory=1TB"], budget)
    one("budget", ["--model-dir", os.path.join(a.data_dir, "model-scale-b"), "--set", f"storage.ssd_dir={ssd}",
                   "--set", f"storage.memory_budget={budget}"], budget)
    out = {"rows": a.scale_rows, "budget_share": a.budget, "budget_bytes": budget, "replay": not extra,
           "same_digest": all(r["digest"] == mem["digest"] for r in runs.values())}
    for name in ("budget", "budget_pass_memory_off"):
        if name in runs:
            out["ratio_over_in_memory" + name[6:]] = runs[name]["examples_per_s"] / mem["examples_per_s"]
    return out

if __name__ == "__main__":
    main()
