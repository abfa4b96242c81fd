#!/usr/bin/python3
"""Checkpoint cost (docs/checkpoints.md): the training slowdown from a checkpoint after every
pass (ckpt.every_passes=1, the default ckpt settings) against no checkpoints, in memory and
over the SSD tier, at the default pipeline settings; and what the checkpoints write: MB/s and
bytes per row for bases and deltas. Beside it, the peer: torch.save (+ fsync) of a PyTorch
state dict of the same size as ctrbox's table (the embedding rows of every key, dim 16, with
Adagrad state) and the same MLP, to the same disk.

Prints one JSON line per run and a summary with medians (runs interleaved) and ratios:
  - slowdown = (train seconds + final checkpoint seconds) with checkpoints / without; target <= 1.10;
  - every digest with checkpoints equals the one without (checkpointing never changes the math).

  bench/ckpt_bench.py [--data-dir DIR] [--reps 3] [--fraction 0.3] [--modes memory,ssd]

Data: shared/baselines/gen_criteo.py's 1 M training rows (seed 11) and 200 K test rows
(seed 12), generated into --data-dir if absent.
"""
import argparse, json, os, shutil, statistics, sys, time

from bench_data import ROOT, criteo_train_test, train


def torch_save(path, keys, dim, mlp):
    """torch.save of an embedding of `keys` rows with Adagrad state and the MLP, fsynced."""
    import torch
    from torch import nn
    torch.manual_seed(1)
    emb = nn.Embedding(keys, dim)
    layers, width = [], 13 + 26 * dim
    for h in mlp:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 1))
    model = nn.Sequential(*layers)
    state = {"emb": emb.state_dict(), "emb_adagrad": torch.zeros(keys, dim), "mlp": model.state_dict()}
    t = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t
    size = os.path.getsize(path)
    os.remove(path)
    return {"bytes": size, "seconds": seconds, "mb_per_s": size / 1e6 / seconds, "bytes_per_row": size / keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.3, help="SSD tier: memory budget / in-memory table")
    ap.add_argument("--modes", default="memory,ssd")
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    a = ap.parse_args()
    d = a.data_dir
    train_tsv, test_tsv = criteo_train_test(d)
    common = ["--data", train_tsv, "--eval-data", test_tsv, "--fresh", "--set", "train.deterministic=true"]
    ckpt_dir, ssd = os.path.join(d, "ckpt-bench"), os.path.join(d, "ssd-ckpt-bench")
    runs, budget, keys = {}, None, None
    modes = a.modes.split(",")
    for rep in range(a.reps):
        for tier in modes:
            for ckpt in (False, True):
                args = common + ["--model-dir", os.path.join(d, f"model-ckpt-{tier}")]
                if tier == "ssd":
                    if budget is None:
                        sys.exit("--modes must list memory before ssd (the budget is a fraction of it)")
                    shutil.rmtree(ssd, ignore_errors=True)
                    args += ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}"]
                if ckpt:
                    shutil.rmtree(ckpt_dir, ignore_errors=True)
                    args += ["--set", f"ckpt.dir={ckpt_dir}", "--set", "ckpt.every_passes=1"]
                r = train(a.ctrbox, args)
                if tier == "memory" and budget is None:
                    budget, keys = int(a.fraction * r["table_memory_bytes"]), r["keys"]
                c = r.get("checkpoint", {})
                seconds = r["seconds"] + c.get("final_seconds", 0.0)
                key = f"{tier}-{'ckpt' if ckpt else 'none'}"
                runs.setdefault(key, []).append({"seconds": seconds, "digest": r["digest"], "c": c})
                line = {"bench": "ckpt", "tier": tier, "checkpoints": ckpt, "rep": rep, "seconds": seconds,
                        "train_seconds": r["seconds"], "examples_per_s": r["examples_per_s"], "passes": r["passes"],
                        "keys": r["keys"], "test_auc": r["test_auc"], "digest": r["digest"],
                        "checkpoint_seconds_in_push": r.get("checkpoint_seconds", 0.0),
                        "push_busy_seconds": r["stages"]["push"]["busy_seconds"],
                        "train_busy_seconds": r["stages"]["train"]["busy_seconds"]}
                if ckpt:
                    line["checkpoint"] = c
                    line["ckpt_dir_bytes"] = sum(os.path.getsize(os.path.join(p, f))
                                                 for p, _, fs in os.walk(ckpt_dir) for f in fs)
                if tier == "ssd":
                    line.update({"memory_budget": budget, "hit_rate": r["storage"]["hit_rate"]})
                print(json.dumps(line), flush=True)
    med = {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()}
    summary = {"bench": "ckpt_summary", "reps": a.reps, "seconds_median": med,
               "same_digest": all(len({x["digest"] for k, v in runs.items() if k.startswith(t) for x in v}) == 1
                                  for t in modes)}
    for tier in modes:
        summary[f"{tier}_slowdown"] = med[f"{tier}-ckpt"] / med[f"{tier}-none"]
        cs = [x["c"] for x in runs[f"{tier}-ckpt"]]
        for kind in ("base", "delta"):
            if any(c[f"{kind}s"] for c in cs):
                summary[f"{tier}_{kind}_mb_per_s_median"] = statistics.median(c[f"{kind}_mb_per_s"] for c in cs if c[f"{kind}s"])
                summary[f"{tier}_{kind}_bytes_per_row"] = statistics.median(c[f"{kind}_bytes_per_row"] for c in cs if c[f"{kind}s"])
                summary[f"{tier}_{kind}_rows_per_checkpoint"] = statistics.median(c[f"{kind}_rows"] / c[f"{kind}s"] for c in cs if c[f"{kind}s"])
    summary["torch_save"] = [torch_save(os.path.join(d, "torch_ckpt.pt"), keys, 16, [512, 256, 128])
                             for _ in range(a.reps)]
    summary["torch_save_mb_per_s_median"] = statistics.median(t["mb_per_s"] for t in summary["torch_save"])
    summary["torch_save_seconds_median"] = statistics.median(t["seconds"] for t in summary["torch_save"])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
