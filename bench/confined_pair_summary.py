#!/usr/bin/env python3
"""One JSON line for a pair of bench/confined_rehearsal.sh runs: the confined run directory, then the
unconfined one (train.json, train.log, cg.txt of each): examples/s and their ratio, digests, test AUC,
peak memory, the cgroup's counters, the store's and the device's reads and writes, the disk view and
the stages' busy shares (bench/results/confined_100m.jsonl's fields).

  bench/confined_pair_summary.py OUT_DIR/CONFINED_NAME OUT_DIR/UNCONFINED_NAME
"""
import json, sys, re

def load(d):
    r = None
    try:
        lines = [l for l in open(d + "/train.json").read().splitlines() if l.strip().startswith("{")]
        r = json.loads(lines[-1]) if lines else None
    except FileNotFoundError:
        pass
    cg = dict(l.split("=", 1) for l in open(d + "/cg.txt").read().splitlines() if "=" in l and not l.startswith("limit="))
    lim = {}
    for l in open(d + "/cg.txt").read().splitlines():
        if l.startswith("limit="):
            lim = dict(kv.split("=") for kv in l.split())
        m = re.match(r"oom_kill (\d+)", l)
        if m: lim["oom_kill"] = int(m.group(1))
    b = [int(x) for x in cg["dev_before"].split()]; a = [int(x) for x in cg["dev_after"].split()]
    dev = {"device_reads": a[0]-b[0], "device_read_bytes": (a[2]-b[2])*512,
           "device_writes": a[4]-b[4], "device_write_bytes": (a[6]-b[6])*512}
    return r, int(cg["rc"]), lim, dev

conf, unconf = sys.argv[1], sys.argv[2]
rc, rcrc, lim, dev = load(conf)
ru, urc, _, udev = load(unconf)
st, su = rc["storage"], ru["storage"]
out = {"exit_status": rcrc, "unconfined_exit_status": urc,
       "examples_per_s": rc["examples_per_s"], "seconds": rc["seconds"],
       "unconfined_examples_per_s": ru["examples_per_s"], "unconfined_seconds": ru["seconds"],
       "ratio": round(rc["examples_per_s"] / ru["examples_per_s"], 3),
       "digest": rc["digest"], "unconfined_digest": ru["digest"],
       "test_auc": rc["test_auc"], "unconfined_test_auc": ru["test_auc"],
       "keys": rc["keys"], "bytes_live": rc.get("bytes_live"),
       "peak_rss_bytes": rc["peak_rss_bytes"], "unconfined_peak_rss_bytes": ru["peak_rss_bytes"],
       "peak_anon_rss_bytes": rc.get("peak_anon_rss_bytes"),
       "unconfined_peak_anon_rss_bytes": ru.get("peak_anon_rss_bytes"),
       # The cache's slabs at the end (table_memory_bytes) against what the budget counts, and
       # the embedding slabs given back on the way (CacheStripe::ShrinkArenas).
       "table_memory_bytes": rc.get("table_memory_bytes"), "memory_bytes": st.get("memory_bytes"),
       "arena_shrinks": st.get("arena_shrinks"), "arena_freed_bytes": st.get("arena_freed_bytes"),
       "cgroup": {k: int(v) for k, v in lim.items()},
       "passes": rc["passes"], "hit_rate": st["hit_rate"], "loaded_from_ssd": st["loaded_from_ssd"],
       "records_read": st["records_read"], "mapped_records_read": st.get("mapped_records_read"),
       "read_path_switches": st.get("read_path_switches"), "direct_reads": st.get("direct_reads"),
       "device_pulls": st.get("device_pulls"), "device_read_switches": st.get("device_read_switches"),
       "writeback_reads": st["writeback_reads"], "groups_written": st["groups_written"],
       "spared_victims": st.get("spared_victims"),
       "unconfined_groups_written": su["groups_written"],
       "unconfined_spared_victims": su.get("spared_victims"),
       "merges": st["merges"], "ssd_bytes_read": st["ssd_bytes_read"],
       "ssd_bytes_written": st["ssd_bytes_written"], "write_amplification": st["write_amplification"],
       "file_bytes": st["file_bytes"], "live_bytes": st["live_bytes"],
       "unconfined_records_read": su["records_read"], "unconfined_hit_rate": su["hit_rate"],
       "unconfined_device_pulls": su.get("device_pulls"),
       "unconfined_file_bytes": su["file_bytes"], "unconfined_live_bytes": su["live_bytes"],
       **dev, "unconfined_device_reads": udev["device_reads"],
       "disk": rc.get("disk"), "unconfined_disk": ru.get("disk"),
       "stages": {k: round(v["busy_seconds"] / rc["seconds"], 3) for k, v in rc["stages"].items()},
       "unconfined_stages": {k: round(v["busy_seconds"] / ru["seconds"], 3) for k, v in ru["stages"].items()},
       "blas_core": rc["blas_core"]}
print(json.dumps(out))
