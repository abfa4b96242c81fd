#!/usr/bin/env python3
"""A stream job's exactly-once check on a device (docs/routine.md): `ctrbox gen --partitions`
writes hourly partitions; one stream job trains them in one start, another in two (stopped
after the second partition, started again); deterministic training must give both the same
digest and the same serving versions (checksums). Prints one JSON line per run and a summary.
On a GPU machine bench/gpu_check.sh runs it with --device gpu; here --device gpu --emulate
runs the GPU step on the CPU.

    bench/stream_check.py [--device cpu|gpu] [--emulate] [--partitions 4] [--rows 50000]
"""
import json, os, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402


def main():
    ap = bench_data.arg_parser(__doc__, reps=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows", type=int, default=50000)
    a = ap.parse_args()
    work = os.path.join(a.data_dir, "stream_check")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = os.path.join(work, "root")
    subprocess.run([a.ctrbox, "gen", "--partitions", str(a.partitions), "--rows", str(a.rows),
                    "--out", root], check=True, capture_output=True)
    last = f"20261101/{a.partitions - 1:02d}"
    job = [a.ctrbox, "train", "--set", f"stream.root={root}", "--set", "stream.poll_seconds=0.1",
           "--set", f"device={a.device}", "--set", "train.deterministic=true",
           "--set", "table.ttl_partitions=2", "--set", "serving.base_every=2",
           "--set", "train.progress_seconds=1e9"]
    if a.emulate:
        job += ["--set", "gpu.emulate=true"]

    def run(name, until):
        t0 = time.time()
        p = subprocess.run(job + ["--set", f"stream.until={until}",
                                  "--set", f"ckpt.dir={work}/ckpt_{name}",
                                  "--set", f"serving.dir={work}/serving_{name}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"stream job {name} failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        line = {"bench": "stream_check", "run": name, "until": until, "device": a.device,
                "emulate": a.emulate, "digest": r.get("digest"),
                "partitions_trained_now": r["stream"]["partitions_trained_now"],
                "seconds": time.time() - t0, "blas_core": r.get("blas_core")}
        print(json.dumps(line), flush=True)
        return r

    one = run("one", last)
    run("two", "20261101/01")
    two = run("two", last)

    def checksums(name):
        with open(os.path.join(work, f"serving_{name}", "versions.jsonl")) as f:
            return [json.loads(x)["checksum"] for x in f]

    same_versions = checksums("one") == checksums("two")
    print(json.dumps({"bench": "stream_check", "summary": True, "device": a.device,
                      "emulate": a.emulate, "partitions": a.partitions, "rows": a.rows,
                      "same_digest": one["digest"] == two["digest"],
                      "same_versions": same_versions,
                      "versions": len(checksums("one"))}), flush=True)
    if one["digest"] != two["digest"] or not same_versions:
        sys.exit(1)


if __name__ == "__main__":
    main()
