#!/usr/bin/env python3
"""The SSD tier where the page cache cannot hide it (issue 58): the same budgeted training job
run unconfined and inside a memory cgroup whose limit counts the page cache (cgroup v1
memory.limit_in_bytes at /sys/fs/cgroup/memory, or v2 memory.max), set below what the job's
process, its input and its SSD files would take together. The disk's own limits are measured
in the same run with fio on the same file system, so that each figure has its ceiling beside
it.

  bench/confined.py [--rows 2000000] [--fraction 0.1] [--limit-factor 1.25] [--reps 1]
                    [--set KEY=VALUE ...] [--data-dir DIR] [--ctrbox build/ctrbox]

(--set: a setting of the budgeted runs, e.g. storage.group_bits=17.)

Steps: an in-memory run (its bytes_live sets the budget: --fraction of it); the budgeted run
unconfined (its peak RSS sets the limit: --limit-factor x it, or --limit BYTES); then, per
repetition, the budgeted run confined and unconfined again, the page cache dropped before
each (as root). Every run is train.deterministic=true: the confined run must give the
unconfined run's digest.

One JSON line per run: examples/s, test AUC, hit rate, SSD bytes read and written per
example, SSD record reads per second and their mean size, the disk's reads and read bytes
(/sys/dev/block/.../stat of the file system's device, so the page cache's hits are not
counted), the rows loaded from the SSD per example and the read amplification (SSD bytes read
over those rows' live bytes), peak RSS, and for the confined run the cgroup's peak usage, page cache and OOM
kills. Then a line for fio (random 4 KiB reads/s at queue depth 1 and 16, sequential MB/s)
and a summary: confined / unconfined examples/s (median), the disk's random reads against
the rows' reads, and whether the digests agree.
"""
import json, os, resource, shutil, statistics, subprocess, sys, time

from bench_data import arg_parser, criteo_file

CG1 = "/sys/fs/cgroup/memory"
CG2 = "/sys/fs/cgroup"


def cgroup_kind():
    """'v1', 'v2' or None (with why), for a memory limit that counts the page cache."""
    if os.path.isfile(os.path.join(CG1, "memory.limit_in_bytes")) and os.access(CG1, os.W_OK):
        return "v1", ""
    ctl = os.path.join(CG2, "cgroup.controllers")
    if os.path.isfile(ctl) and "memory" in open(ctl).read().split() and os.access(CG2, os.W_OK):
        return "v2", ""
    return None, "no writable cgroup memory controller (v1 at /sys/fs/cgroup/memory, v2 at /sys/fs/cgroup)"


class Cgroup:
    """A memory cgroup of `limit` bytes (page cache included) for one command."""

    def __init__(self, kind, limit):
        self.kind = kind
        self.path = os.path.join(CG1 if kind == "v1" else CG2, f"ctrbox-confined-{os.getpid()}")
        os.makedirs(self.path, exist_ok=True)
        knob = "memory.limit_in_bytes" if kind == "v1" else "memory.max"
        with open(os.path.join(self.path, knob), "w") as f:
            f.write(str(limit))
        if kind == "v1":
            with open(os.path.join(self.path, "memory.max_usage_in_bytes"), "w") as f:
                f.write("0")  # (reset)

    def enter(self):  # in the child, before exec
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def stats(self):
        def read(name):
            try:
                return open(os.path.join(self.path, name)).read()
            except OSError:
                return ""
        stat = dict(l.split() for l in read("memory.stat").splitlines() if len(l.split()) == 2)
        if self.kind == "v1":
            oom = dict(l.split() for l in read("memory.oom_control").splitlines())
            return {"cgroup": "v1", "peak_bytes": int(read("memory.max_usage_in_bytes") or 0),
                    "page_cache_bytes": int(stat.get("total_cache", stat.get("cache", 0))),
                    "limit_hits": int(read("memory.failcnt") or 0), "oom_kills": int(oom.get("oom_kill", 0))}
        events = dict(l.split() for l in read("memory.events").splitlines())
        return {"cgroup": "v2", "peak_bytes": int(read("memory.peak") or 0),
                "page_cache_bytes": int(stat.get("file", 0)),
                "limit_hits": int(events.get("max", 0)), "oom_kills": int(events.get("oom_kill", 0))}

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def device_stat(path):
    """(reads completed, bytes read) of the block device holding `path`."""
    st = os.stat(path)
    dev = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"
    try:
        f = open(dev).read().split()
        return int(f[0]), int(f[2]) * 512
    except OSError:
        return 0, 0


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def run(ctrbox, args, cgroup=None):
    """`ctrbox train ARGS` (in `cgroup` when given): its report, or None and the error."""
    p = subprocess.run([ctrbox, "train", *args, "--set", "train.progress_seconds=1e9"],
                       capture_output=True, text=True, preexec_fn=cgroup.enter if cgroup else None)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr[-1500:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), ""


def fio(directory):
    """The disk's limits on the file system of `directory` (fio from Debian), or why not."""
    if shutil.which("fio") is None:
        return {"fio": "not installed (scripts/setup --bench installs Debian's fio)"}
    out = {}
    target = os.path.join(directory, "fio.dat")
    jobs = [("randread_4k_qd1_per_s", ["--rw=randread", "--bs=4k", "--ioengine=psync", "--iodepth=1"], "iops"),
            ("randread_4k_qd16_per_s", ["--rw=randread", "--bs=4k", "--ioengine=libaio", "--iodepth=16"], "iops"),
            ("seqread_mb_per_s", ["--rw=read", "--bs=1m", "--ioengine=libaio", "--iodepth=8"], "bw")]
    for name, opts, what in jobs:
        p = subprocess.run(["fio", "--name=probe", f"--filename={target}", "--size=1g", "--direct=1",
                            "--runtime=8", "--time_based", "--output-format=json", *opts],
                           capture_output=True, text=True)
        if p.returncode != 0:
            out[name] = f"fio failed: {p.stderr[-300:]}"
            continue
        r = json.loads(p.stdout)["jobs"][0]["read"]
        out[name] = round(r["iops"]) if what == "iops" else round(r["bw"] / 1024, 1)
    try:
        os.remove(target)
    except OSError:
        pass
    return out


def line(name, r, seconds, disk, row_bytes, cg=None):
    s = r["storage"]
    ex = max(r["examples"], 1)
    needed = s["loaded_from_ssd"] * row_bytes  # the bytes of the rows the passes loaded
    out = {"bench": "confined", "run": name, "examples": r["examples"],
           "examples_per_s": r["examples_per_s"], "test_auc": r.get("test_auc"), "digest": r["digest"],
           "hit_rate": s.get("hit_rate"), "ssd_bytes_read_per_example": s["ssd_bytes_read"] / ex,
           "ssd_bytes_written_per_example": s["ssd_bytes_written"] / ex,
           "ssd_record_reads_per_s": s["records_read"] / max(r["seconds"], 1e-9),
           "ssd_read_mean_bytes": s["ssd_bytes_read"] / max(s["records_read"], 1),
           "rows_loaded_from_ssd_per_example": s["loaded_from_ssd"] / ex,
           "read_amplification": s["ssd_bytes_read"] / needed if needed else None,
           "disk_reads": disk[0], "disk_read_bytes": disk[1], "disk_reads_per_s": disk[0] / seconds,
           "peak_rss_bytes": r["peak_rss_bytes"], "peak_anon_rss_bytes": r.get("peak_anon_rss_bytes"),
           "mapped_reads": s.get("mapped_reads"), "mapped_records_read": s.get("mapped_records_read"),
           "read_path_switches": s.get("read_path_switches"),
           "device_pulls": s.get("device_pulls"), "device_read_switches": s.get("device_read_switches"),
           "spared_victims": s.get("spared_victims"), "groups_written": s.get("groups_written"),
           "seconds": seconds, "blas_core": r["blas_core"]}
    if cg:
        out.update(cg)
    return out


def main():
    ap = arg_parser(__doc__, 1)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--limit-factor", type=float, default=1.25)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for the budgeted runs")
    a = ap.parse_args()
    kind, why = cgroup_kind()
    if kind is None:
        print(json.dumps({"bench": "confined", "skipped": why}))
        return
    train = criteo_file(os.path.join(a.data_dir, f"confined-{a.rows}.tsv"), a.rows, 21)
    test = criteo_file(os.path.join(a.data_dir, f"confined-test-{a.test_rows}.tsv"), a.test_rows, 22)
    ssd = os.path.join(a.data_dir, "confined-ssd")
    model = os.path.join(a.data_dir, "confined-model")
    common = ["--data", train, "--eval-data", test, "--fresh", "--model-dir", model,
              "--set", "train.deterministic=true"]
    mem, err = run(a.ctrbox, common)
    if mem is None:
        sys.exit(err)
    budget = int(a.fraction * mem["bytes_live"])
    row_bytes = mem["bytes_live"] / max(mem["keys"], 1)  # a row's live bytes
    tiered = common + ["--set", f"storage.ssd_dir={ssd}", "--set", f"storage.memory_budget={budget}"]
    for kv in a.set:
        tiered += ["--set", kv]
    print(json.dumps({"bench": "confined", "run": "memory", "examples_per_s": mem["examples_per_s"],
                      "bytes_live": mem["bytes_live"], "digest": mem["digest"], "budget": budget,
                      "peak_rss_bytes": mem["peak_rss_bytes"], "blas_core": mem["blas_core"]}), flush=True)
    shutil.rmtree(ssd, ignore_errors=True)
    first, err = run(a.ctrbox, tiered)
    if first is None:
        sys.exit(err)
    # The job's own memory: peak_rss_bytes counts the SSD files' pages mapped reads touched.
    limit = a.limit or int(a.limit_factor * first.get("peak_anon_rss_bytes", first["peak_rss_bytes"]))
    data_bytes = os.path.getsize(train) + os.path.getsize(test)
    print(json.dumps({"bench": "confined", "run": "setup", "cgroup": kind, "limit_bytes": limit,
                      "input_bytes": data_bytes, "ssd_file_bytes": first["storage"]["file_bytes"],
                      "cold_start": drop_caches()}), flush=True)
    rates = {"confined": [], "unconfined": []}
    digests = {mem["digest"], first["digest"]}
    disk_reads_per_row_read = []
    for rep in range(a.reps):
        for name in ("confined", "unconfined"):
            shutil.rmtree(ssd, ignore_errors=True)
            drop_caches()
            cg = Cgroup(kind, limit) if name == "confined" else None
            d0 = device_stat(a.data_dir)
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            r, err = run(a.ctrbox, tiered, cg)
            seconds = time.monotonic() - t0
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            d1 = device_stat(a.data_dir)
            stats = cg.stats() if cg else None
            if cg:
                cg.remove()
            if r is None:
                print(json.dumps({"bench": "confined", "run": name, "rep": rep, "failed": err,
                                  **(stats or {})}), flush=True)
                continue
            l = line(name, r, seconds, (d1[0] - d0[0], d1[1] - d0[1]), row_bytes, stats)
            l["rep"] = rep
            l["user_cpu_s"] = round(c1.ru_utime - c0.ru_utime, 2)
            l["system_cpu_s"] = round(c1.ru_stime - c0.ru_stime, 2)
            print(json.dumps(l), flush=True)
            rates[name].append(r["examples_per_s"])
            digests.add(r["digest"])
            if name == "confined" and r["storage"]["records_read"]:
                disk_reads_per_row_read.append(l["disk_reads"] / r["storage"]["records_read"])
    disk = fio(a.data_dir)
    print(json.dumps({"bench": "confined", "run": "fio", "dir": a.data_dir, **disk}), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    summary = {"bench": "confined_summary", "rows": a.rows, "reps": a.reps, "cgroup": kind,
               "settings": a.set, "group_bits": first["storage"].get("group_bits"),
               "limit_bytes": limit, "fraction": a.fraction, "examples_per_s": med,
               "confined_vs_unconfined": med["confined"] / med["unconfined"]
               if "confined" in med and "unconfined" in med else None,
               "disk_reads_per_ssd_record_read": statistics.median(disk_reads_per_row_read)
               if disk_reads_per_row_read else None,
               "same_digest": len(digests) == 1, "blas_core": first["blas_core"]}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
