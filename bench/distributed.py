#!/usr/bin/env python3
"""Distributed training on one machine (docs/distributed.md): the 1 M / 200 K benchmark files
split into 4 files, trained by 1 process and by 2 and 4 ranks (threads of one process:
--local-ranks; and processes under mpirun when it is installed), with the stages overlapped
(the default) and, for 2 ranks, one after the other. Prints one JSON line per run:
examples/s, test AUC, and the bytes each rank sent per example it trained (keys, rows and
gradients: the all-to-all volume of docs/distributed.md), with the stage times.

On one 2-core machine the ranks share the cores (each gets train.threads = cores / ranks), so
examples/s measures the exchange's overhead, not a speedup; the bytes are what a network
would carry (docs/distributed.md, "Scaling model").

With --tiered SHARE, each run of ranks is repeated with tiered shards: every rank's
storage.memory_budget is SHARE of its in-memory shard (the run's bytes_live / ranks), its SSD
files under the data dir, passes sized by memory with the cuts agreed by the ranks
(docs/distributed.md, "Pass sizing across ranks"); the line adds the hit rate, peak RSS and
whether the digest is the in-memory run's. --ranks and --transports pick runs.

--sparse-updates owner,replicated runs every in-memory run of ranks with each
dist.sparse_updates mode (docs/distributed.md, "Owner updates"); the lines name the mode, and
give the bytes each rank received per example too.

--device gpu trains every run on the GPUs (a GPU machine: each rank's GPUs, the ranks' sums
over MPI; docs/distributed.md, "GPUs across ranks"); the lines name the device.

    bench/distributed.py [--data-dir /tmp/ctrbox-bench] [--reps 1] [--tiered 0.1]
                         [--ranks 2,4] [--transports process,threads,mpi]
                         [--sparse-updates owner] [--device cpu]
"""
import json, os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402


def split(train, out_dir, parts):
    """Splits train into `parts` contiguous files (once); returns their paths."""
    paths = [os.path.join(out_dir, f"part-{i}.tsv") for i in range(parts)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(out_dir, exist_ok=True)
    with open(train) as f:
        lines = f.readlines()
    per = (len(lines) + parts - 1) // parts
    for i, p in enumerate(paths):
        with open(p + ".tmp", "w") as f:
            f.writelines(lines[i * per:(i + 1) * per])
        os.rename(p + ".tmp", p)
    return paths


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])}... failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = bench_data.arg_parser(__doc__, 1)
    ap.add_argument("--tiered", type=float, default=0.0)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--transports", default="process,threads,mpi")
    ap.add_argument("--sparse-updates", default="owner")
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    a = ap.parse_args()
    modes = a.sparse_updates.split(",")
    ranks = [int(x) for x in a.ranks.split(",")]
    transports = a.transports.split(",")
    train, test = bench_data.criteo_train_test(a.data_dir)
    parts = split(train, os.path.join(a.data_dir, "parts4"), 4)
    cores = os.cpu_count() or 1
    model_dir = os.path.join(a.data_dir, "dist-model")
    data = [x for p in parts for x in ("--data", p)]
    # (transport, ranks, stages overlapped): the default overlaps them; 2 ranks also run them
    # one after the other, to show what the overlap gives on this machine.
    runs = [("process", 1, True)] + [("threads", n, True) for n in (2, 4)] + [("threads", 2, False)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if shutil.which("mpirun"):
        runs += [("mpi", 2, True), ("mpi", 4, True), ("mpi", 2, False)]
    runs = [r for r in runs if r[0] in transports and (r[1] == 1 or r[1] in ranks)]
    # Each run of ranks once per sparse-update mode (the first mode's is the reference).
    runs = [(*r, m) for r in runs for m in (modes if r[1] > 1 else modes[:1])]
    if a.tiered > 0:  # each pipelined run of ranks again over tiered shards, after it
        runs = [x for r in runs
                for x in ([r, (*r, "tiered")] if r[1] > 1 and r[2] and r[3] == modes[0] else [r])]
    in_memory = {}  # (transport, ranks) -> the in-memory run's report
    for transport, n, pipelined, mode, *tier in runs:
        threads = max(1, cores // n)
        common = ["train", *data, "--model-dir", model_dir, "--fresh",
                  "--set", f"train.threads={threads}", "--set", "train.progress_seconds=1e9",
                  "--set", f"pipeline.enabled={'true' if pipelined else 'false'}",
                  "--set", f"dist.sparse_updates={mode}", "--set", f"device={a.device}"]
        if tier:
            mem = in_memory[(transport, n)]
            budget = int(a.tiered * mem["bytes_live"] / n)
            ssd = os.path.join(a.data_dir, "dist-ssd")
            shutil.rmtree(ssd, ignore_errors=True)
            common += ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}"]
        reports = []
        for _ in range(a.reps):
            if transport == "process":
                cmd = [a.ctrbox, *common]
            elif transport == "threads":
                cmd = [a.ctrbox, *common, "--local-ranks", str(n)]
            else:
                cmd = ["mpirun", "-np", str(n), "--oversubscribe", a.ctrbox, *common]
            reports.append(run(cmd, env))
        r = reports[-1]
        ev = run([a.ctrbox, "eval", "--model-dir", model_dir, "--data", test])
        per_rank = r.get("per_rank", [])
        sent = [x["exchange_bytes_sent"] / max(1, x["examples"]) for x in per_rank]
        received = [x["exchange_bytes_received"] / max(1, x["examples"]) for x in per_rank]
        line = {
            "bench": "distributed", "transport": transport, "ranks": n, "pipelined": pipelined,
            "sparse_updates": mode, "device": r["device"],
            "threads_per_rank": threads, "cores": cores, "blas_core": r["blas_core"],
            "examples": r["examples"],
            "examples_per_s": statistics.median(x["examples_per_s"] for x in reports),
            "reps": a.reps, "test_auc": ev["auc"], "digest": r["digest"],
            "bytes_sent_per_example_per_rank": statistics.mean(sent) if sent else 0.0,
            "bytes_received_per_example_per_rank": statistics.mean(received) if received else 0.0,
            # Time in the exchanges (waiting for the slowest rank included), mean over ranks.
            "exchange_s": statistics.mean(x["exchange_seconds"] for x in per_rank) if per_rank else 0.0,
            "seconds": r["seconds"],
            "stages_busy_s": {k: round(v["busy_seconds"], 3) for k, v in r["stages"].items()},
            "peak_rss_bytes": r.get("peak_rss_bytes"),
        }
        if tier:
            mem = in_memory[(transport, n)]
            line.update({"tiered": True, "budget_share": a.tiered,
                         "memory_budget_per_rank": budget,
                         "hit_rate": r["storage"].get("hit_rate"),
                         "vs_in_memory": line["examples_per_s"] / mem["examples_per_s_median"],
                         "same_digest_as_in_memory": r["digest"] == mem["digest"],
                         "pass_sizing": r.get("pass_sizing")})
        elif pipelined and mode == modes[0]:
            in_memory[(transport, n)] = dict(r, examples_per_s_median=line["examples_per_s"])
        elif pipelined and (transport, n) in in_memory:
            line["same_digest_as_" + modes[0]] = r["digest"] == in_memory[(transport, n)]["digest"]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
