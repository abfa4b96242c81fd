#!/usr/bin/env python3
"""The same model on any number of ranks (docs/distributed.md): the cost of canonical sums.

Trains ctrbox's built-in generated data (the default model, Adagrad + Adam) as one process and
as several ranks (threads of one process, --local-ranks), each with train.deterministic=false
(the fastest fixed order: bit-identical run to run for a fixed number of ranks) and =true
(canonical sums: one digest for every number of ranks dividing the batch's sum blocks: 8 at
--batch 1024 (1, 2, 4, 8 ranks), 12 at 1536 (1, 2, 3, 4, 6, 12); unset, the batch is sized
from --rows). The runs are interleaved, --reps
times each; one JSON line per configuration (median examples/s, its spread, the digests),
then a summary line: deterministic / non-deterministic speed per rank count and whether the
deterministic digests agree across the rank counts. The baseline is ctrbox's own
non-deterministic mode: no peer trains the same bits on another number of ranks.
With --files K the same rows come from K files (`ctrbox gen`, seeds 1..K, rows / K each):
deterministic ranks then read every file and keep their share of each global minibatch,
non-deterministic ones read their own files.
Each line also gives the process's CPU seconds (user + system, median), and the summary the
deterministic mode's extra CPU seconds per rank count: on a shared machine they move less than
examples/s. With --device gpu the train stage runs on the GPU (--gpus per rank, logical GPUs
sharing the machine's round robin; --emulate: the host emulation of the GPU step, for a
machine without one).

    bench/same_model.py [--reps 3] [--rows 500000] [--ranks 1,2,4] [--batch N] [--files K]
                        [--device cpu|gpu] [--gpus G] [--emulate]
"""
import json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402


def main():
    ap = bench_data.arg_parser(__doc__, 3)
    ap.add_argument("--rows", type=int, default=500000)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch", type=int, default=0, help="train.batch_size (0: sized from the rows)")
    ap.add_argument("--files", type=int, default=0, help="read the rows from this many files")
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--emulate", action="store_true", help="with --device gpu: gpu.emulate")
    ap.add_argument("--gpus", type=int, default=1, help="with --device gpu: gpu.count per rank")
    a = ap.parse_args()
    data = ["--set", f"data.gen.rows={a.rows}"]
    if a.files:
        data = []
        for f in range(a.files):
            path = os.path.join(a.data_dir, f"same-model-{a.rows // a.files}-{f + 1}.tsv")
            data += ["--data", bench_data.ctrbox_gen(a.ctrbox, path, a.rows // a.files, f + 1)]
    cores = os.cpu_count() or 1
    model_dir = os.path.join(a.data_dir, "same-model")
    configs = [(n, det) for n in (int(x) for x in a.ranks.split(",")) for det in (False, True)]
    got = {c: [] for c in configs}
    for _ in range(a.reps):
        for n, det in configs:
            args = ["--model-dir", model_dir, "--fresh", *data,
                    "--set", f"train.threads={max(1, cores // n)}",
                    "--set", f"train.deterministic={'true' if det else 'false'}"]
            if a.batch:
                args += ["--set", f"train.batch_size={a.batch}"]
            if a.device == "gpu":
                args += ["--set", "device=gpu", "--set", f"gpu.emulate={'true' if a.emulate else 'false'}",
                         "--set", f"gpu.count={a.gpus}"]
            if n > 1:
                args += ["--local-ranks", str(n)]
            got[(n, det)].append(bench_data.train(a.ctrbox, args))
    median, cpu = {}, {}
    for (n, det), reports in got.items():
        eps = [r["examples_per_s"] for r in reports]
        median[(n, det)] = statistics.median(eps)
        cpu[(n, det)] = statistics.median(r["process_cpu_seconds"] for r in reports)
        print(json.dumps({
            "bench": "same_model", "ranks": n, "deterministic": det, "reps": a.reps, "files": a.files,
            "examples": reports[-1]["examples"], "batch_size": reports[-1]["batch_size"],
            "examples_per_s": median[(n, det)],
            "examples_per_s_min": min(eps), "examples_per_s_max": max(eps),
            "process_cpu_seconds": cpu[(n, det)], "device": a.device + (" emulated" if a.emulate else ""),
            "gpus_per_rank": a.gpus if a.device == "gpu" else 0,
            "test_auc": reports[-1].get("test_auc"), "digests": sorted({r["digest"] for r in reports}),
            "cores": cores, "blas_core": reports[-1]["blas_core"]}), flush=True)
    ranks = sorted({n for n, _ in configs})
    det_digests = {n: got[(n, True)][-1]["digest"] for n in ranks}
    print(json.dumps({
        "bench": "same_model", "summary": True,
        "deterministic_vs_fast": {str(n): median[(n, True)] / median[(n, False)] for n in ranks},
        "deterministic_extra_cpu_seconds": {str(n): cpu[(n, True)] - cpu[(n, False)] for n in ranks},
        "deterministic_digests": det_digests,
        "one_digest_for_every_rank_count": len(set(det_digests.values())) == 1,
        "fast_digests_differ": len({got[(n, False)][-1]["digest"] for n in ranks}) > 1}))


if __name__ == "__main__":
    main()
