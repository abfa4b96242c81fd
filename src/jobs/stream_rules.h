// The rules a stream job checks and applies around its loop (docs/routine.md): one serving.dir
// for its life, stream.start on a resumed stream, the admission counters' cost, a partition's
// files unchanged on every rank, a partition's share on each rank and its schema. Internal to
// src/jobs.
#ifndef CTRBOX_JOBS_STREAM_RULES_H_
#define CTRBOX_JOBS_STREAM_RULES_H_

#include <cstdint>
#include <optional>
#include <string>

#include "dist/comm.h"
#include "io/partitions.h"
#include "jobs/follower.h"
#include "jobs/job.h"
#include "jobs/stream_state.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox::stream_parts {

// A stream publishes into one serving.dir for its whole life: a resumed job naming another
// one (or none) would write versions that follow no base there.
Status CheckServingDir(const JobConfig& job, const StreamState& state, const std::string& ckpt);

// stream.start on a resumed stream: past `next`, the partitions between are skipped (a way
// past a partition the stream cannot take); before it, the stream goes on at `next`.
void MoveToStart(const PartitionLayout& layout, std::optional<int64_t> start_at,
                 StreamState* state);

// table.admit.bloom_bits costs 2^bits bytes of counters, encoded again and written with every
// partition's commit: said when it is large, refused when it cannot fit in this machine.
Status CheckAdmissionCost(const JobConfig& job);

// CheckUnchanged on every rank: one rank's changed file stops them all, before the commit.
Status CheckUnchangedOnRanks(Env* env, Comm* comm, const Partition& p);

// The job reading partition p: its files, or on ranks (job.dist.ranks > 1) this rank's share
// of them by the rule of a job of files (whole files i with i mod ranks = rank; byte ranges
// of every file when there are fewer files than ranks).
JobConfig PartitionJob(const JobConfig& job, const Partition& p, int rank);

// The partition's data has the stream's schema.
Status CheckSchema(const JobConfig& job, const Partition& p, const Schema& got);

}  // namespace ctrbox::stream_parts

#endif  // CTRBOX_JOBS_STREAM_RULES_H_
