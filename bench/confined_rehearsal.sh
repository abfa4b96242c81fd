#!/bin/bash
# Issue 58's 100 M-key target (15 GB of rows in a 4 GiB box) rehearsed at 1/6 scale: the 12 M-key
# model (4 M generated rows of zipf 1.02, vocab_scale 1000: 17.3 M keys, 2.56 GB of rows) with a
# 256 MB budget, unconfined (LIMIT_BYTES 0) or inside a cgroup v1 memory limit that counts the
# page cache (734003200 = 700 MiB = 4 GiB x 2.56 / 14.98). As root; drops the page cache first.
#
#   bench/confined_rehearsal.sh NAME LIMIT_BYTES [--set KEY=VALUE ...]
#   e.g. bench/confined_rehearsal.sh unconf 0; bench/confined_rehearsal.sh conf 734003200
#
# Writes under $OUT_DIR/NAME (default /tmp/confined_rehearsal): train.json (the job's JSON; none
# if it was killed), train.log (its log and /usr/bin/time -v), cg.txt (exit status, the file
# system's device counters before and after, and for a confined run the cgroup's peak usage,
# limit hits, peak RSS and page cache sampled every 2 s, and oom_control).
# bench/results/confined_12m_rehearsal.jsonl holds one pair of runs, assembled from these files;
# bench/confined_pair_summary.py CONFINED_DIR UNCONFINED_DIR prints such a pair as one JSON line.
set -u
name=$1; limit=$2; shift 2
ctrbox=${CTRBOX:-$(cd "$(dirname "$0")/.." && pwd)/build/ctrbox}
out=${OUT_DIR:-/tmp/confined_rehearsal}/$name
rm -rf "$out"; mkdir -p "$out"
dev=$(basename "$(df --output=source "$out" | tail -1)")
sync; echo 3 > /proc/sys/vm/drop_caches
dev_before=$(cat /sys/class/block/$dev/stat)
cg=/sys/fs/cgroup/memory/ctrbox-rehearsal-$name
if [ "$limit" != 0 ]; then
  rmdir $cg 2>/dev/null; mkdir -p $cg
  echo $limit > $cg/memory.limit_in_bytes
  echo 0 > $cg/memory.max_usage_in_bytes
fi
(
  if [ "$limit" != 0 ]; then echo $BASHPID > $cg/cgroup.procs; fi
  exec /usr/bin/time -v "$ctrbox" train --model-dir $out/model --fresh \
    --set data.gen.rows=4000000 --set data.gen.test_rows=200000 --set data.gen.zipf=1.02 \
    --set data.gen.vocab_scale=1000 --set storage.ssd_dir=$out/ssd \
    --set storage.memory_budget=255829129 --set train.progress_seconds=60 "$@" \
    > $out/train.json 2> $out/train.log
) &
pid=$!
maxcache=0; maxrss=0
while kill -0 $pid 2>/dev/null; do
  if [ "$limit" != 0 ]; then
    c=$(awk '$1=="total_cache"{print $2}' $cg/memory.stat); r=$(awk '$1=="total_rss"{print $2}' $cg/memory.stat)
    [ "${c:-0}" -gt $maxcache ] && maxcache=$c; [ "${r:-0}" -gt $maxrss ] && maxrss=$r
  fi
  sleep 2
done
wait $pid; rc=$?
dev_after=$(cat /sys/class/block/$dev/stat)
{
  echo "rc=$rc"
  echo "dev_before=$dev_before"; echo "dev_after=$dev_after"
  if [ "$limit" != 0 ]; then
    echo "limit=$limit max_usage=$(cat $cg/memory.max_usage_in_bytes) failcnt=$(cat $cg/memory.failcnt) max_cache=$maxcache max_rss=$maxrss"
    cat $cg/memory.oom_control
  fi
} > $out/cg.txt
if [ "$limit" != 0 ]; then rmdir $cg; fi
echo "$name: exit status $rc; $out"
