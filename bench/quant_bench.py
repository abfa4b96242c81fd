#!/usr/bin/env python3
"""Reproduces the quantization paper's experiments (SIGMOD'21, ../shared/papers/003_*, §4.1)
on gen_criteo.py data: one pass over the training stream (online learning; the per-pass AUC
is test-then-train: each example is predicted before the model learns from it), then the
held-out test set. Runs, all with the same data, seed and deterministic training:

  float32; FixQ (nearest) and StocQ (stochastic) at 8, 12 and 16 bits with w = 1;
  StocQ-16 with w in {0.01, 0.1, 1, 10, 100};
  StocQ-16 with the embedding dimension doubled (same stored bytes per key as float32);

with the paper's optimizer (sparse SGD; lr 100 on the minibatch-mean loss, i.e. 0.05 per
example at batch 2048) and, as a check on ctrbox's default optimizer, float32 / StocQ / FixQ
at 8 and 16 bits with Adagrad (whose float state stays per element). A last group trains the
first --budget-rows rows with storage.memory_budget at a fixed size (--budget-fraction of the
float32 table): what the budget holds in memory at each width.

A speed group (--speed-reps, default 3) trains the default model (Adagrad) on the first
--budget-rows rows in memory as float32, StocQ-16, StocQ-8 and FixQ-8, repetitions
interleaved: medians and ratios of examples/s (the cost of rounding every update and of
coding rows in and out of the table).

Prints one JSON line per run; writes a Markdown report (tables; findings are kept from the
previous report) and an SVG plot of the online AUC over the stream relative to float32 (the
paper's Figures 2, 3 and 5). --from JSONL rebuilds the report and plot from printed lines.

  bench/quant_bench.py [--data-dir DIR] [--train-rows 3000000] [--test-rows 300000]
      [--report bench/results/quant_report.md] [--plot bench/results/quant_online_auc.svg]
      [--groups quality,budget,speed] [--from JSONL]
"""
import argparse, json, os, shutil, statistics, subprocess, sys

from bench_data import ROOT, criteo_file

SGD = ["--set", "optimizer.sparse.type=sgd", "--set", "optimizer.sparse.lr=100"]
ADAGRAD = ["--set", "optimizer.sparse.type=adagrad"]


def quant(bits, rounding="stochastic", w=1.0):
    if bits == 0:
        return []
    return ["--set", f"storage.quant.bits={bits}", "--set", f"storage.quant.rounding={rounding}",
            "--set", f"storage.quant.range={w}"]


def configs():
    c = [("sgd/float32", SGD)]
    for bits in (8, 12, 16):
        c.append((f"sgd/FixQ-{bits}", SGD + quant(bits, "nearest")))
        c.append((f"sgd/StocQ-{bits}", SGD + quant(bits)))
    for w in (0.01, 0.1, 10, 100):
        c.append((f"sgd/StocQ-16 w={w:g}", SGD + quant(16, w=w)))
    c.append(("sgd/StocQ-16 dim=32", SGD + quant(16) + ["--set", "model.embedding_dim=32"]))
    c.append(("adagrad/float32", ADAGRAD))
    for bits in (8, 16):
        c.append((f"adagrad/FixQ-{bits}", ADAGRAD + quant(bits, "nearest")))
        c.append((f"adagrad/StocQ-{bits}", ADAGRAD + quant(bits)))
    return c


def train(ctrbox, args, work):
    metrics = os.path.join(work, "metrics.jsonl")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    p = subprocess.run([ctrbox, "train", *args, "--model-dir", os.path.join(work, "model"), "--fresh",
                        "--set", "train.progress_seconds=1e9", "--set", f"train.metrics_path={metrics}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ctrbox train {' '.join(args)} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    passes = [json.loads(l) for l in open(metrics) if '"event":"pass"' in l]
    r["_online"] = [(q["examples"], q["auc"], q["pass_examples"]) for q in passes]
    return r


def plot(recs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = {r["run"]: r for r in recs if r["bench"] == "quant"}
    base = runs.get("sgd/float32")
    if not base:
        return
    groups = [("FixQ vs StocQ at 8/12/16 bits (w = 1)",
               lambda n: ("FixQ" in n or "StocQ-" in n) and "w=" not in n and "dim" not in n),
              ("StocQ-16: quantization range w", lambda n: "w=" in n or n == "sgd/StocQ-16"),
              ("StocQ-16 at dimension 32 (float32's bytes at 16)", lambda n: "dim=32" in n or n == "sgd/StocQ-16")]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    x0 = [e / 1e6 for e, _, _ in base["online"]]
    for ax, (title, keep) in zip(axes, groups):
        for name, r in runs.items():
            if not name.startswith("sgd/") or name == "sgd/float32" or not keep(name):
                continue
            d = [a - b for (_, a, _), (_, b, _) in zip(r["online"], base["online"])]
            ax.plot(x0[:len(d)], d, label=name[4:], linestyle="--" if "FixQ" in name else "-")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(title)
        ax.set_xlabel("examples trained (millions)")
        ax.set_ylabel("online AUC of the pass minus float32's")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("ctrbox quantized embeddings on gen_criteo data, one pass, sparse SGD: "
                 "test-then-train AUC per pass of 65,536 examples relative to float32")
    fig.tight_layout()
    fig.savefig(path)


def report(recs, path):
    meta = next((r for r in recs if r["bench"] == "quant_meta"), {})
    findings = "(to be written after the run)"
    if os.path.exists(path):
        old = open(path).read()
        if "## Findings" in old:
            findings = old.split("## Findings", 1)[1].strip()
    runs = {r["run"]: r for r in recs if r["bench"] == "quant"}
    lines = ["# Quantized embeddings: the SIGMOD'21 experiments on gen_criteo data", "",
             f"Generated by `{meta.get('command', 'bench/quant_bench.py')}` on {meta.get('machine', '?')}. "
             f"Data: gen_criteo.py {meta.get('train_rows', 0):,} training rows (seed {meta.get('train_seed')}), "
             f"{meta.get('test_rows', 0):,} test rows (seed {meta.get('test_seed')}); the planted model's "
             f"(oracle) test AUC is {meta.get('oracle_auc', float('nan')):.4f}. One pass, deterministic. "
             "*Online AUC*: test-then-train AUC over the whole stream (each example predicted before "
             "the model learns from it); *test*: the held-out rows after the pass. The sgd runs use the "
             "paper's optimizer (lr 100 on the minibatch-mean loss = 0.05 per example at batch 2048); "
             "adagrad is ctrbox's default. Value bytes per key: the stored row without its key.", "",
             "| run | bits | w | dim | value bytes/key | online AUC | test AUC | Δ test AUC vs float32 | test logloss |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        base = runs.get(name.split("/")[0] + "/float32")
        q = r["quant"]
        delta = r["test_auc"] - base["test_auc"] if base else float("nan")
        lines.append(f"| {name} | {q['bits'] or 32} | {format(q['range'], '.3g') if q['bits'] else '–'} | "
                     f"{r['dim']} | {r['value_bytes_per_key']:.0f} | {r['online_auc']:.5f} | {r['test_auc']:.5f} | "
                     f"{delta:+.5f} | {r['test_logloss']:.5f} |")
    budget = [r for r in recs if r["bench"] == "quant_budget" and "error" not in r]
    if budget:
        b0 = budget[0]
        lines += ["", f"**One memory budget for every width**: {b0['memory_budget'] / 1e6:.1f} MB "
                  f"({meta.get('budget_fraction', 0):.0%} of the float32 table), the first "
                  f"{meta.get('budget_rows', 0):,} rows, sgd, SSD tier. Keys in memory at the end of the run "
                  "(eviction keeps a sawtooth below the budget); Bloom filter bytes count against the budget.", "",
                  "| run | keys | keys in memory | Bloom filter bytes | hit rate | SSD bytes read | SSD bytes written | digest equals in-memory run |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in budget:
            st = r["storage"]
            lines.append(f"| {r['run']} | {r['keys']:,} | {r['keys_in_memory']:,} | {st['bloom_bytes']:,} | "
                         f"{st['hit_rate']:.3f} | {st['ssd_bytes_read']:,} | {st['ssd_bytes_written']:,} | "
                         f"{r['digest_equals_in_memory']} |")
    speed = [r for r in recs if r["bench"] == "quant_speed"]
    if speed:
        names = list(dict.fromkeys(r["run"] for r in speed))
        med = {n: statistics.median(r["examples_per_s"] for r in speed if r["run"] == n) for n in names}
        reps = max(sum(1 for r in speed if r["run"] == n) for n in names)
        lines += ["", f"**Speed** (default model, Adagrad, in memory, first {meta.get('budget_rows', 0):,} rows, "
                  f"median of {reps} interleaved runs, nothing else running):", "",
                  "| run | examples/s | vs float32 |", "|---|---|---|"]
        for n in names:
            lines.append(f"| {n} | {med[n]:,.0f} | {med[n] / med[names[0]]:.3f} |")
    lines += ["", "## Findings", "", findings, ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def emit(rec):
    print(json.dumps(rec), flush=True)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--train-rows", type=int, default=3_000_000)
    ap.add_argument("--test-rows", type=int, default=300_000)
    ap.add_argument("--pass-examples", type=int, default=65536)
    ap.add_argument("--budget-rows", type=int, default=1_000_000)
    ap.add_argument("--budget-fraction", type=float, default=0.3)
    ap.add_argument("--speed-reps", type=int, default=3)
    ap.add_argument("--groups", default="quality,budget,speed")
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    ap.add_argument("--report", default=os.path.join(ROOT, "bench", "results", "quant_report.md"))
    ap.add_argument("--plot", default=os.path.join(ROOT, "bench", "results", "quant_online_auc.svg"))
    ap.add_argument("--from", dest="from_jsonl", default="", help="rebuild report and plot from these lines")
    a = ap.parse_args()
    if a.from_jsonl:
        recs = [json.loads(l) for l in open(a.from_jsonl) if l.startswith("{")]
        report(recs, a.report)
        plot(recs, a.plot)
        return
    groups = set(a.groups.split(","))
    d = a.data_dir
    train_tsv = criteo_file(os.path.join(d, f"quant-train-{a.train_rows}.tsv"), a.train_rows, 31)
    test_tsv = criteo_file(os.path.join(d, f"quant-test-{a.test_rows}.tsv"), a.test_rows, 32)
    oracle_json = os.path.join(d, f"quant-test-{a.test_rows}.oracle.json")
    if not os.path.exists(oracle_json):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "..", "shared", "baselines", "gen_criteo.py"),
                        "--rows", str(a.test_rows), "--seed", "32", "--out", os.devnull, "--oracle", oracle_json],
                       check=True, stdout=subprocess.DEVNULL)
    oracle = json.load(open(oracle_json))
    recs = [emit({"bench": "quant_meta", "command": "bench/quant_bench.py " + " ".join(sys.argv[1:]),
                  "train_rows": a.train_rows, "test_rows": a.test_rows, "train_seed": 31, "test_seed": 32,
                  "oracle_auc": oracle.get("oracle_auc", float("nan")), "budget_rows": a.budget_rows,
                  "budget_fraction": a.budget_fraction,
                  "machine": f"{os.cpu_count()} CPUs ({os.uname().machine}), OPENBLAS_CORETYPE="
                             f"{os.environ.get('OPENBLAS_CORETYPE', 'auto')}"})]
    work = os.path.join(d, "quant-run")
    if "quality" in groups:
        common = ["--data", train_tsv, "--eval-data", test_tsv, "--set", "train.deterministic=true",
                  "--set", f"pipeline.pass_examples={a.pass_examples}"]
        for name, args in configs():
            r = train(a.ctrbox, common + args, work)
            recs.append(emit({"bench": "quant", "run": name, "quant": r["quant"],
                              "dim": 32 if "model.embedding_dim=32" in args else 16, "online_auc": r["auc"],
                              "test_auc": r["test_auc"], "test_logloss": r["test_logloss"],
                              "value_bytes_per_key": r["value_bytes_per_key"], "keys": r["keys"],
                              "examples_per_s": r["examples_per_s"], "digest": r["digest"], "online": r["_online"]}))

    head = os.path.join(d, f"quant-train-head-{a.budget_rows}.tsv")
    if groups & {"budget", "speed"} and not os.path.exists(head):
        with open(train_tsv) as src, open(head + ".tmp", "w") as dst:
            for i, line in enumerate(src):
                if i >= a.budget_rows:
                    break
                dst.write(line)
        os.rename(head + ".tmp", head)
    if "budget" in groups:
        # The memory budget at one size for every width: float32's table at --budget-fraction.
        # Small passes: a pass's rows are pinned while it is in flight and must fit the budget.
        bcommon = ["--data", head, "--set", "train.deterministic=true", "--set", "pipeline.pass_examples=8192"]
        mem = {bits: train(a.ctrbox, bcommon + SGD + quant(bits), work) for bits in (0, 16, 8)}
        budget = int(mem[0]["bytes_live"] * a.budget_fraction)
        ssd = os.path.join(d, "quant-ssd")
        for bits in (0, 16, 8):
            name = f"budget/{'float32' if bits == 0 else f'StocQ-{bits}'}"
            shutil.rmtree(ssd, ignore_errors=True)
            try:
                r = train(a.ctrbox, bcommon + SGD + quant(bits) + ["--set", f"storage.ssd_dir={ssd}",
                                                                     "--set", f"storage.memory_budget={budget}"], work)
            except RuntimeError as e:
                recs.append(emit({"bench": "quant_budget", "run": name, "error": str(e)[-500:]}))
                continue
            recs.append(emit({"bench": "quant_budget", "run": name, "memory_budget": budget, "keys": r["keys"],
                              "keys_in_memory": r["keys_in_memory"], "storage": r["storage"],
                              "examples_per_s": r["examples_per_s"],
                              "digest_equals_in_memory": r["digest"] == mem[bits]["digest"]}))
        shutil.rmtree(ssd, ignore_errors=True)
    if "speed" in groups:
        runs = [("adagrad/float32", []), ("adagrad/StocQ-16", quant(16)), ("adagrad/StocQ-8", quant(8)),
                ("adagrad/FixQ-8", quant(8, "nearest"))]
        for rep in range(a.speed_reps):
            for name, args in runs:
                r = train(a.ctrbox, ["--data", head] + args, work)
                recs.append(emit({"bench": "quant_speed", "run": name, "rep": rep,
                                  "examples_per_s": r["examples_per_s"], "seconds": r["seconds"]}))
    shutil.rmtree(work, ignore_errors=True)
    if a.report:
        report(recs, a.report)
    if a.plot:
        plot(recs, a.plot)


if __name__ == "__main__":
    main()
