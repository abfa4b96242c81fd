#!/usr/bin/env python3
"""Routine training on arriving data (docs/routine.md), two runs:

1. hourly: `ctrbox gen --partitions 24 --interval S` lands a day of hourly partitions (drifting
   click rate, new ids every hour) while a stream job follows them (test, then train, a
   serving delta per hour, a base every 6). Per hour, the stream's online AUC is printed
   beside a model retrained from scratch on all earlier hours (`ctrbox train` on their files,
   `ctrbox eval` on the hour); then the seconds from a partition's done file to its version
   published (median, max) and the delta bytes against the base bytes.
2. ttl: 200 partitions, all landed, a stream with table.ttl_partitions: resident keys and
   RSS after each partition, and the slope of each over the second half (flat after warm-up).

    bench/routine.py [--rows 20000] [--interval 2] [--ttl-partitions 200] [--ttl-rows 4000]
"""
import datetime, json, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402

MODEL = ["--set", "model.mlp=64,32", "--set", "train.batch_size=512"]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def partition_lines(metrics):
    with open(metrics) as f:
        return [j for j in map(json.loads, f) if j.get("event") == "partition"]


def stream_job(ctrbox, root, work, until, extra):
    return [ctrbox, "train", "--set", f"stream.root={root}", "--set", f"stream.until={until}",
            "--set", "stream.poll_seconds=0.2", "--set", f"ckpt.dir={work}/ckpt",
            "--set", f"serving.dir={work}/serving", "--set", f"train.metrics_path={work}/metrics.jsonl",
            "--set", "train.progress_seconds=1e9", *MODEL, *extra]


def hourly(a):
    work = os.path.join(a.data_dir, "routine_hourly")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = os.path.join(work, "root")
    names = [f"20261101/{h:02d}" for h in range(24)]
    # The partitions land while the job runs.
    gen = subprocess.Popen([a.ctrbox, "gen", "--partitions", "24", "--rows", str(a.rows),
                            "--interval", str(a.interval), "--out", root],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    report = run(stream_job(a.ctrbox, root, work, names[-1],
                            ["--set", "serving.base_every=6", "--set", "table.ttl_partitions=48"]))
    gen_report = json.loads(gen.communicate()[0].strip().splitlines()[-1])
    lines = partition_lines(os.path.join(work, "metrics.jsonl"))
    oracle = {p["partition"]: p["oracle_auc"] for p in gen_report["partitions"]}
    part_file = lambda n: os.path.join(root, n, "part-00000")  # noqa: E731
    diffs = []
    for h, line in enumerate(lines):
        out = {"bench": "routine", "run": "hourly", "partition": line["partition"],
               "online_auc": line["online"]["auc"], "online_logloss": line["online"]["logloss"],
               "online_copc": line["online"]["copc"], "oracle_auc": oracle[line["partition"]],
               "keys": line["keys"], "evicted": line["evicted"],
               "ready_to_published_seconds": line.get("ready_to_published_seconds"),
               "version_kind": line["serving"]["kind"], "version_bytes": line["serving"]["bytes"]}
        if h > 0:  # retrained from scratch on hours 0..h-1, evaluated on hour h
            model = os.path.join(work, "scratch")
            shutil.rmtree(model, ignore_errors=True)
            bench_data.train(a.ctrbox, ["--data", *[part_file(n) for n in names[:h]],
                                        "--model-dir", model, *MODEL])
            e = run([a.ctrbox, "eval", "--model-dir", model, "--data", part_file(names[h])])
            out["scratch_auc"] = e["auc"]
            out["online_minus_scratch"] = line["online"]["auc"] - e["auc"]
            diffs.append(out["online_minus_scratch"])
        print(json.dumps(out), flush=True)
    lat = [x["ready_to_published_seconds"] for x in lines if x.get("ready_to_published_seconds")]
    bases = [x["serving"]["bytes"] for x in lines if x["serving"]["kind"] == "base"]
    deltas = [x["serving"]["bytes"] for x in lines if x["serving"]["kind"] == "delta"]
    print(json.dumps({
        "bench": "routine", "run": "hourly", "summary": True, "partitions": len(lines),
        "rows_per_partition": a.rows, "interval_s": a.interval,
        "online_minus_scratch_median": statistics.median(diffs),
        "online_minus_scratch_min": min(diffs), "within_0.005": all(d >= -0.005 for d in diffs),
        "ready_to_published_s_median": statistics.median(lat), "ready_to_published_s_max": max(lat),
        "base_bytes_median": statistics.median(bases), "delta_bytes_median": statistics.median(deltas),
        "delta_over_base": statistics.median(deltas) / statistics.median(bases),
        "blas_core": report.get("blas_core")}), flush=True)


def ttl(a):
    work = os.path.join(a.data_dir, "routine_ttl")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = os.path.join(work, "root")
    n = a.ttl_partitions
    last = (datetime.datetime(2026, 11, 1) + datetime.timedelta(hours=n - 1)).strftime("%Y%m%d/%H")
    run([a.ctrbox, "gen", "--partitions", str(n), "--rows", str(a.ttl_rows), "--new-id-share",
         "0.2", "--out", root])
    t0 = time.time()
    report = run(stream_job(a.ctrbox, root, work, last,
                            ["--set", "table.ttl_partitions=12", "--set", "serving.base_every=24"]))
    lines = partition_lines(os.path.join(work, "metrics.jsonl"))
    for i, line in enumerate(lines):
        if i % 10 == 9 or i == 0:
            print(json.dumps({"bench": "routine", "run": "ttl", "partition": line["partition"],
                              "index": i + 1, "keys": line["keys"], "evicted": line["evicted"],
                              "rss_bytes": line["rss_bytes"],
                              "online_auc": line["online"]["auc"]}), flush=True)
    half = lines[len(lines) // 2:]

    def slope(key):  # per partition, least squares over the second half
        xs = list(range(len(half)))
        ys = [x[key] for x in half]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)

    keys_half = [x["keys"] for x in half]
    print(json.dumps({
        "bench": "routine", "run": "ttl", "summary": True, "partitions": len(lines),
        "rows_per_partition": a.ttl_rows, "ttl_partitions": 12,
        "keys_second_half_min": min(keys_half), "keys_second_half_max": max(keys_half),
        "keys_slope_per_partition": slope("keys"),
        "keys_slope_over_mean": slope("keys") / statistics.mean(keys_half),
        "rss_second_half_mb": [min(x["rss_bytes"] for x in half) / 2**20,
                               max(x["rss_bytes"] for x in half) / 2**20],
        "rss_slope_bytes_per_partition": slope("rss_bytes"),
        "seconds": time.time() - t0, "blas_core": report.get("blas_core")}), flush=True)


def main():
    ap = bench_data.arg_parser(__doc__, reps=1)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--ttl-partitions", type=int, default=200)
    ap.add_argument("--ttl-rows", type=int, default=4000)
    ap.add_argument("--only", choices=["hourly", "ttl"])
    a = ap.parse_args()
    os.makedirs(a.data_dir, exist_ok=True)
    if a.only != "ttl":
        hourly(a)
    if a.only != "hourly":
        ttl(a)


if __name__ == "__main__":
    main()
