// The checkpoints of a distributed job (docs/distributed.md, "Checkpoints"): rank r of n keeps
// its own chain (checkpoint.h) in ckpt.dir/rank-r-of-n, and a checkpoint of the job exists
// once every rank committed it and rank 0 committed ckpt.dir/RANKS naming it: a two-phase
// commit whose second phase is one atomic rename. A rank's checkpoints newer than RANKS are
// not the job's (a rank crashed before the others committed theirs) and are removed before a
// resume.
#ifndef CTRBOX_CKPT_RANKS_CHECKPOINT_H_
#define CTRBOX_CKPT_RANKS_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

struct RanksCheckpoint {
  uint32_t ranks = 1;
  uint64_t id = 0;  // the checkpoint id every rank committed
};

// ckpt.dir/rank-<rank>-of-<ranks>.
std::string RankCheckpointDir(const std::string& dir, int rank, int ranks);

// Writes dir/RANKS atomically (write, fsync, rename, fsync the directory).
Status CommitRanksCheckpoint(Env* env, const std::string& dir, const RanksCheckpoint& c);
// Reads dir/RANKS; NotFound when there is none; Corruption naming the file when it is damaged.
StatusOr<RanksCheckpoint> ReadRanksCheckpoint(Env* env, const std::string& dir);

}  // namespace ctrbox

#endif  // CTRBOX_CKPT_RANKS_CHECKPOINT_H_
