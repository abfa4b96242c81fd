#!/usr/bin/env python3
"""What a write into the page cache costs the CPU when its pages are new (a new file, as the
SSD tier's files were until storage.recycle_files) and when they are a cached file's, written
over in place (a recycled file; docs/storage.md, "Recycled files"). Writes --mib MiB in 1 MiB
writes, --reps times each way, and prints one JSON line per write pass (CPU seconds and wall
seconds per GiB) and a summary of the medians.

  bench/page_cache_writes.py [--dir /tmp] [--mib 1024] [--reps 3]
"""
import argparse, json, os, statistics, time


def write_pass(path, mib, truncate, buf):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0), 0o644)
    cpu, wall = time.process_time(), time.monotonic()
    for i in range(mib):
        os.pwrite(fd, buf, i << 20)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    os.close(fd)
    gib = mib / 1024
    return cpu / gib, wall / gib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    path = os.path.join(a.dir, f"page_cache_writes.{os.getpid()}.dat")
    buf = os.urandom(1 << 20)
    runs = {"new_file": [], "over_cached_file": []}
    try:
        for rep in range(a.reps):  # a new file each time: the old one's pages are freed
            if os.path.exists(path):
                os.unlink(path)
            runs["new_file"].append(write_pass(path, a.mib, True, buf))
        for rep in range(a.reps):  # the same file written over: its pages are in the cache
            runs["over_cached_file"].append(write_pass(path, a.mib, False, buf))
    finally:
        if os.path.exists(path):
            os.unlink(path)
    for way, rs in runs.items():
        for rep, (cpu, wall) in enumerate(rs):
            print(json.dumps({"bench": "page_cache_writes", "way": way, "rep": rep, "mib": a.mib,
                              "cpu_s_per_gib": round(cpu, 3), "wall_s_per_gib": round(wall, 3)}))
    med = {w: statistics.median(c for c, _ in rs) for w, rs in runs.items()}
    print(json.dumps({"bench": "page_cache_writes_summary", "cpu_s_per_gib_median": med,
                      "new_over_cached": round(med["new_file"] / med["over_cached_file"], 2)}))


if __name__ == "__main__":
    main()
