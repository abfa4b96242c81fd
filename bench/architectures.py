#!/usr/bin/env python3
"""The architectures of docs/model.md against their PyTorch twins (bench/torch_twins.py) on the
1 M / 200 K benchmark files: for each of mlp (the default model), deepfm, dcn_v2, dcn_v2_lr
(rank 64), dlrm, dlrm_bottom (with a 64-16 bottom MLP) and aibox (two joint-learning towers,
dense features 0-6 to the first, 7-12 to the second) and dcn_mix (DCN-v2's mixture of 4
low-rank experts of rank 32 per cross layer, DeepCTR's DCNMix defaults) and slot_dims (the
default model with per-slot embedding dimensions by vocabulary: SLOT_DIMS below),
--reps runs of `ctrbox train` and of the twin, alternating, at --threads threads. Prints one
JSON line per run, then per architecture a summary with the medians (examples/s and test AUC),
ctrbox's speed over its twin's, and the AUC differences (to the twin, and to ctrbox's MLP).

  bench/architectures.py [--archs mlp,deepfm,dcn_v2,dcn_v2_lr,dlrm,dlrm_bottom,aibox,dcn_mix,slot_dims]
                         [--reps 3]
                         [--cross-layers 2]
                         [--vary-seed] [--device gpu]

--device gpu runs ctrbox with `device: gpu` and the twins with --device cuda (on a GPU
machine; docs/gpu.md).
"""
import json, os, statistics, subprocess, sys

from bench_data import ROOT, arg_parser, criteo_train_test, train

PY = os.environ.get("CTRBOX_BENCH_PYTHON", "/usr/bin/python3")


# slot_dims: the generator's five huge slots (0.8 M to 3 M ids: slots 2, 3, 11, 15, 20) at 8, the
# seventeen of at most 14 K ids at 32, the three of 70 K to 140 K (9, 23, 25) at the default 16
# (shared/baselines/gen_criteo.py, VOCAB).
SLOT_DIMS = "2+3+11+15+20:8,0+1+4-8+10+12-14+16-19+21+22+24:32"


def ctrbox_sets(arch, cross_layers):
    """The job keys that make `arch` (docs/model.md)."""
    return {"mlp": [],
            "deepfm": ["model.wide=true", "model.fm=true"],
            "dcn_v2": ["model.cross_layers=%d" % cross_layers],
            "dcn_v2_lr": ["model.cross_layers=%d" % cross_layers, "model.cross_rank=64"],
            "dlrm": ["model.dot=true"],
            "dlrm_bottom": ["model.dot=true", "model.bottom_mlp=64,16"],
            "aibox": ["model.towers=2", "model.dense_groups=0-6,7-12"],
            "dcn_mix": ["model.cross_layers=%d" % cross_layers, "model.cross_rank=32",
                        "model.cross_experts=4"],
            "slot_dims": ["model.slot_dims=" + SLOT_DIMS]}[arch]


def main():
    ap = arg_parser(__doc__, reps=3)
    ap.add_argument("--archs", default="mlp,deepfm,dcn_v2,dcn_v2_lr,dlrm,dlrm_bottom,aibox,dcn_mix,slot_dims")
    ap.add_argument("--cross-layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--vary-seed", action="store_true",
                    help="rep r trains with seed r + 1 on both sides (train.seed, --seed): the AUC "
                         "medians then include the initialisation's spread")
    a = ap.parse_args()
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    summaries = {}
    for arch in a.archs.split(","):
        runs = {"ctrbox": [], "pytorch": []}
        for rep in range(a.reps):
            args = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh",
                    "--model-dir", os.path.join(a.data_dir, "model-arch"),
                    "--set", "train.threads=%d" % a.threads, "--set", "device=" + a.device]
            seed = rep + 1 if a.vary_seed else 1
            if a.vary_seed:
                args += ["--set", "train.seed=%d" % seed]
            for s in ctrbox_sets(arch, a.cross_layers):
                args += ["--set", s]
            r = train(a.ctrbox, args)
            runs["ctrbox"].append((r["examples_per_s"], r["test_auc"]))
            print(json.dumps({"bench": "architectures", "system": "ctrbox", "arch": arch, "rep": rep, "seed": seed,
                              "examples_per_s": r["examples_per_s"], "test_auc": r["test_auc"],
                              "seconds": r["seconds"], "train_busy_seconds": r["stages"]["train"]["busy_seconds"],
                              "blas_core": r["blas_core"], "digest": r["digest"],
                              "keys": r["keys"], "bytes_live": r["bytes_live"],
                              "value_bytes_per_key": r["value_bytes_per_key"]}), flush=True)
            p = subprocess.run([PY, os.path.join(ROOT, "bench", "torch_twins.py"), "--arch", arch,
                                "--train", train_tsv, "--test", test_tsv, "--threads", str(a.threads),
                                "--cross-layers", str(a.cross_layers), "--seed", str(seed),
                                "--device", "cuda" if a.device == "gpu" else "cpu"] +
                               (["--cross-rank", "32", "--cross-experts", "4"] if arch == "dcn_mix" else []) +
                               (["--slot-dims", SLOT_DIMS] if arch == "slot_dims" else []),
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("torch_twins.py failed:\n" + p.stderr[-3000:])
            t = json.loads(p.stdout.strip().splitlines()[-1])
            runs["pytorch"].append((t["train_examples_per_s"], t["auc"]))
            print(json.dumps({"bench": "architectures", "system": t["system"], "arch": arch, "rep": rep, "seed": seed,
                              "examples_per_s": t["train_examples_per_s"], "test_auc": t["auc"],
                              "train_seconds": t["train_seconds"], "threads": t["threads"],
                              "embedding_values": t.get("embedding_values")}), flush=True)
        med = {k: statistics.median(x[0] for x in v) for k, v in runs.items()}
        auc = {k: statistics.median(x[1] for x in v) for k, v in runs.items()}
        summaries[arch] = {"bench": "architectures_summary", "arch": arch, "reps": a.reps, "vary_seed": a.vary_seed,
                           "device": a.device,
                           "threads": a.threads, "examples_per_s_median": med, "test_auc_median": auc,
                           "speed_over_twin": med["ctrbox"] / med["pytorch"],
                           "auc_minus_twin": auc["ctrbox"] - auc["pytorch"],
                           "blas_core": r["blas_core"],
                           "extra": ctrbox_sets(arch, a.cross_layers)}
        if "mlp" in summaries:
            summaries[arch]["auc_minus_mlp"] = auc["ctrbox"] - summaries["mlp"]["test_auc_median"]["ctrbox"]
        print(json.dumps(summaries[arch]), flush=True)
    # Architectures run before the MLP get their difference to it here.
    if "mlp" in summaries:
        mlp_auc = summaries["mlp"]["test_auc_median"]["ctrbox"]
        late = {k: v["test_auc_median"]["ctrbox"] - mlp_auc for k, v in summaries.items()
                if "auc_minus_mlp" not in v}
        if late:
            print(json.dumps({"bench": "architectures_vs_mlp", "auc_minus_mlp": late}), flush=True)


if __name__ == "__main__":
    main()
