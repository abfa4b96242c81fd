#!/usr/bin/env bash
# The whole GPU check in one run, each step with its own time limit and the whole under a
# deadline (docs/gpu.md, "On a GPU machine"): the CUDA tests, compute-sanitizer on them, the
# end-to-end benchmark against PyTorch, the 10 % budget, the feed rate, a stream job in one
# start against two (bench/stream_check.py), the CPU trainer's scaling and a kernel profile
# of the step, and train.deterministic's one digest on 1-3 GPU ranks (bench/same_model.py).
# For a bare CUDA machine that has a packed build:
#
#   here:   cmake --build build && echo /.gpu/ >> .git/info/exclude &&
#           ../shared/gpu/pack build .gpu src/gpu/gpu_test src/exec/exec_test bench/host_stages_bench &&
#           mkdir -p .gpu/baselines && cp ../shared/baselines/*.py .gpu/baselines/
#   there:  source .gpu/env.sh && B=$B CTR=$CTR bench/gpu_check.sh [quick|full]   (env.sh does not export them)
#
# Writes its log and JSON lines under $OUT (or ./gpu_check_out): check.log, tests.log,
# gpu_e2e.jsonl, host_stages.jsonl (with the GPU key dedup), sanitizer.log, kernels.txt,
# feed_rate.jsonl, cpu_scaling.jsonl (in that order: issue 54's figures first, so that the
# deadline cuts the others). A failed ctrbox run in gpu_e2e.py is a JSON line with its error;
# the others still run. `quick` runs the
# tests, one rep of the figures and the kernel profile, no sanitizers. About 7 minutes in all
# on an H200 machine with 16 cores (GPU_CHECK_SECONDS: the deadline, 540 by default).
set -u
mode=${1:-full}
out=${OUT:-$PWD/gpu_check_out}
mkdir -p "$out"
exec > >(tee -a "$out/check.log") 2>&1
start=$(date +%s)
deadline=$(( start + ${GPU_CHECK_SECONDS:-540} ))
B=${B:-build}
CTR=${CTR:-build/ctrbox}
export CTRBOX_BASELINES=${CTRBOX_BASELINES:-$PWD/.gpu/baselines}
PY=python3  # the benchmarks start the baselines without LD_LIBRARY_PATH themselves

# step NAME SECONDS COMMAND...: runs COMMAND under min(SECONDS, time to the deadline).
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( deadline - $(date +%s) ))
  if (( left < 10 )); then echo "== $name: skipped (deadline)" >&2; return 0; fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit}s, at $(( $(date +%s) - start ))s)" >&2
  timeout "$limit" "$@"
  local rc=$?
  echo "== $name: rc $rc after $(( $(date +%s) - start ))s" >&2
  return 0
}

# No GPU (no driver, no device, or GPU_CHECK_NVIDIA_SMI naming a probe that fails): say so and
# exit 0, so that a CPU machine (CI, a session without a lent GPU) runs it harmlessly.
if ! gpus=$(${GPU_CHECK_NVIDIA_SMI:-nvidia-smi} -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
  echo "gpu_check: skipped: no GPU here (${GPU_CHECK_NVIDIA_SMI:-nvidia-smi} -L: ${gpus:-nothing})"
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus $(nproc); $(lscpu | grep -m1 'Model name')"
reps=3; [ "$mode" = quick ] && reps=1

step cuda-tests 150 bash -c "$B/src/gpu/gpu_test --gtest_filter='Cuda*:GpuEmulation*:GpuReplay*' 2>&1 | tail -40;
  $B/src/exec/exec_test 2>&1 | tail -3;
  $B/src/feature/feature_test --gtest_filter='*Cuda*' 2>&1 | tail -5" > "$out/tests.log"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.log"
e2e=(--reps "$reps" --ctrbox "$CTR" --scale-rows 4000000)
[ "$mode" = quick ] && e2e+=(--no-torch --gemm fp32 --budget-reps 1 --scale-rows 0)
step gpu-e2e 330 $PY bench/gpu_e2e.py "${e2e[@]}" > "$out/gpu_e2e.jsonl"
tail -1 "$out/gpu_e2e.jsonl"
# The GPU key dedup against the host's working set (gpu_dedup, its last lines).
step host-stages 60 "$B/bench/host_stages_bench" --threads 1,2,4,8,16 --reps 3 > "$out/host_stages.jsonl"
tail -2 "$out/host_stages.jsonl"

# The sanitizers right after the end-to-end figures (before the slower figures that the
# deadline may cut): the replayed step is what a job runs by default.
if [ "$mode" = full ]; then
step memcheck 75 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$B/src/gpu/gpu_test" --gtest_filter='CudaReplayTest.*:CudaBackendTest.TensorCore*:CudaBackendTest.DeviceHash*' \
  > "$out/sanitizer.log" 2>&1
step racecheck 75 compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$B/src/gpu/gpu_test" --gtest_filter='CudaReplayTest.*:CudaBackendTest.DeviceHashIndex*:CudaBackendTest.TensorCore*' \
  >> "$out/sanitizer.log" 2>&1
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$out/sanitizer.log" | tail -8
fi

step kernels 60 bash -c "ncu --clock-control none --csv --metrics gpu__time_duration.sum \
  --launch-skip 3000 --launch-count 120 $CTR train --format shards \
  --data /tmp/ctrbox-bench-gpu/train_shards --fresh --model-dir /tmp/ctrbox-ncu --set device=gpu \
  --set train.progress_seconds=1e9" > "$out/kernels.csv" 2>/dev/null
$PY - "$out/kernels.csv" > "$out/kernels.txt" <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
h = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if h is None:
    sys.exit("no kernel rows")
hdr, rows = rows[h], rows[h + 1:]
k, v, u = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
total = 0.0
for r in rows:
    t = float(r[v].replace(",", "")) * scale.get(r[u], 1.0)
    total += t
    m = re.search(r"GpuStep<ctrbox::CudaExec>::(\w+)", r[k])
    print(f"{t:9.1f} us  {(m.group(1) if m else r[k][:100])}")
print(f"{total:9.1f} us over {len(rows)} kernels")
PY
tail -1 "$out/kernels.txt"; rm -f "$out/kernels.csv"

feed_threads=1,2,4,8,16; [ "$mode" = quick ] && feed_threads=1,16
step feed-rate 120 $PY bench/feed_rate.py --device gpu --threads "$feed_threads" --reps 1 \
  --ctrbox "$CTR" --data-dir /tmp/ctrbox-bench-gpu > "$out/feed_rate.jsonl"
tail -1 "$out/feed_rate.jsonl"
# A stream job on the GPU (docs/routine.md): one start against two, the same digest and
# versions (its JSON lines go to check.log).
step stream 120 $PY bench/stream_check.py --device gpu --ctrbox "$CTR" --data-dir /tmp/ctrbox-bench-gpu
# train.deterministic on the GPU (docs/distributed.md, "GPU ranks"): one digest
# for 1, 2 and 3 thread ranks sharing the GPU, and its cost against the default sums (its JSON
# lines go to check.log: $OUT brings back 8 files).
step same-model 150 $PY bench/same_model.py --device gpu --rows 300000 --batch 1536 \
  --ranks 1,2,3 --reps 1 --ctrbox "$CTR" --data-dir /tmp/ctrbox-bench-gpu
# Two logical GPUs per rank on the one device: the same deterministic digest as above.
[ "$mode" = quick ] || step same-model-2gpus 100 $PY bench/same_model.py --device gpu --gpus 2 \
  --rows 300000 --batch 1536 --ranks 1,2 --reps 1 --ctrbox "$CTR" --data-dir /tmp/ctrbox-bench-gpu
[ "$mode" = quick ] || step cpu-scaling 90 $PY bench/cpu_scaling.py --threads 2,16 --reps 2 --ctrbox "$CTR" \
  --data-dir /tmp/ctrbox-bench-gpu > "$out/cpu_scaling.jsonl"
tail -1 "$out/cpu_scaling.jsonl" 2>/dev/null

echo "gpu_check done in $(( $(date +%s) - start ))s"
