#include "jobs/stream_rules.h"

#include <fmt/format.h>

#include "dist/collectives.h"
#include "util/logging.h"
#include "util/sys.h"

namespace ctrbox::stream_parts {

// A stream publishes into one serving.dir for its whole life: a resumed job naming another
// one (or none) would write versions that follow no base there.
Status CheckServingDir(const JobConfig& job, const StreamState& state, const std::string& ckpt) {
  if (state.serving_dir.empty() || state.serving_dir == job.serving.dir) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "serving.dir: this stream publishes into {} ({} of ckpt.dir {} says so), but this start "
      "names {}: give it {} again, or start a new stream (--fresh, a new serving.dir)",
      state.serving_dir, ckpt, job.ckpt.dir,
      job.serving.dir.empty() ? std::string("none") : job.serving.dir, state.serving_dir));
}

// stream.start on a resumed stream: past `next`, the partitions between are skipped (a way
// past a partition the stream cannot take); before it, the stream goes on at `next`.
void MoveToStart(const PartitionLayout& layout, std::optional<int64_t> start_at,
                 StreamState* state) {
  if (!start_at || *start_at == state->next) return;
  if (*start_at < state->next) {
    LOG_INFO("stream.start {}: the stream is past it already (it continues at {})",
             layout.Name(*start_at), layout.Name(state->next));
    return;
  }
  LOG_WARNING("stream.start {}: moving on from {}: {} partitions skipped (never trained)",
              layout.Name(*start_at), layout.Name(state->next), *start_at - state->next);
  state->Skip(state->next, *start_at - 1);
  state->next = *start_at;
}

// table.admit.bloom_bits costs 2^bits bytes of counters, encoded again and written with every
// partition's commit: said when it is large, refused when it cannot fit in this machine.
Status CheckAdmissionCost(const JobConfig& job) {
  if (job.stream.admit_min_count <= 1) return Status::OK();
  const uint64_t counters = uint64_t{1} << job.stream.admit_bloom_bits;
  const uint64_t peak = 2 * counters;  // the counters and their encoding at a commit
  const uint64_t memory = PhysicalMemoryBytes();
  if (memory > 0 && peak > memory / 2) {
    return InvalidArgumentError(fmt::format(
        "table.admit.bloom_bits {}: {:.1f} GiB of counters, at least {:.1f} GiB while a "
        "partition commits, is more than half of this machine's {:.1f} GiB: give fewer bits (24: "
        "16 MiB "
        "counts ~5 M keys with few false admissions; docs/routine.md)",
        job.stream.admit_bloom_bits, counters / 1073741824.0, peak / 1073741824.0,
        memory / 1073741824.0));
  }
  if (counters >= (uint64_t{1} << 28)) {
    LOG_WARNING(
        "table.admit.bloom_bits {}: {:.2f} GiB of counters in memory (at least {:.2f} GiB "
        "while a partition commits), and {:.2f} GiB written to ckpt.dir with every partition",
        job.stream.admit_bloom_bits, counters / 1073741824.0, peak / 1073741824.0,
        counters / 1073741824.0);
  }
  return Status::OK();
}

// CheckUnchanged on every rank: one rank's changed file stops them all, before the commit.
Status CheckUnchangedOnRanks(Env* env, Comm* comm, const Partition& p) {
  Status mine = CheckUnchanged(env, p);
  if (comm == nullptr) return mine;
  uint64_t bad = mine.ok() ? 0 : 1;
  RETURN_IF_ERROR(AllReduceMax(comm, &bad, 1));
  if (!mine.ok()) return mine;
  if (bad != 0) {
    return FailedPreconditionError(fmt::format(
        "partition {}: another rank found a file changed while it was read (its log names "
        "it): nothing of the partition is committed",
        p.name));
  }
  return Status::OK();
}

// The job reading partition p: its files, or on ranks (job.dist.ranks > 1) this rank's share
// of them by the rule of a job of files (whole files i with i mod ranks = rank; byte ranges
// of every file when there are fewer files than ranks).
JobConfig PartitionJob(const JobConfig& job, const Partition& p, int rank) {
  JobConfig j = job;
  j.data.paths = p.files;
  const int n = job.dist.ranks;
  if (n > 1) {
    if (p.files.size() >= static_cast<size_t>(n)) {
      j.data.paths.clear();
      for (size_t i = rank; i < p.files.size(); i += n) j.data.paths.push_back(p.files[i]);
    } else {
      j.data.byte_share = ByteShare{static_cast<uint32_t>(rank), static_cast<uint32_t>(n)};
    }
  }
  return j;
}

// The partition's data has the stream's schema.
Status CheckSchema(const JobConfig& job, const Partition& p, const Schema& got) {
  if (got == job.spec.schema) return Status::OK();
  return InvalidArgumentError(fmt::format(
      "partition {}: its data has {} slots and {} dense values, the stream's model {} and {}",
      p.name, got.num_slots, got.num_dense, job.spec.schema.num_slots, job.spec.schema.num_dense));
}

}  // namespace ctrbox::stream_parts
