// Resuming a job of files on another number of ranks (docs/distributed.md, "Resuming files on
// another number of ranks"): what each old rank had left of its input becomes a list of file
// segments, and the new ranks share those segments out.
#ifndef CTRBOX_JOBS_FILE_SHARES_H_
#define CTRBOX_JOBS_FILE_SHARES_H_

#include <string>
#include <vector>

#include "ckpt/ranks_checkpoint.h"
#include "dist/comm.h"
#include "jobs/job.h"

namespace ctrbox {

// The input rank `rank` of `ranks` reads in a job of `files` (every epoch, in order), as
// segments: files i with i mod ranks = rank when there are at least `ranks` files, else part
// `rank` of every file (the trainer's split, docs/distributed.md "Data").
std::vector<DataSegment> RankFileStream(const std::vector<std::string>& files, int ranks, int rank,
                                        uint32_t epochs);

// A segment and about how many of its bytes are left to read.
struct SizedSegment {
  DataSegment segment;
  uint64_t bytes = 0;
};

// What is left of `stream` once its first `consumed` rows were read: the segments not reached,
// and the one the position falls in with its skip grown. Reads the first `consumed` rows
// (through `data`'s reader options). FailedPrecondition when the stream holds fewer rows.
StatusOr<std::vector<SizedSegment>> StreamRemainder(Env* env, const DataOptions& data,
                                                    const std::vector<DataSegment>& stream,
                                                    uint64_t consumed);

// `rest` in at least `target` segments where its files allow it: a segment of a plain text
// file, part p of P, becomes parts pS to pS + S - 1 of PS, which hold the same lines (less its
// skip, found by reading). So more ranks than there were can each take a share.
StatusOr<std::vector<SizedSegment>> SplitSegments(Env* env, const DataOptions& data,
                                                  std::vector<SizedSegment> rest, size_t target);

// Shares `segments` out to `ranks` ranks, in order, each to the rank with the fewest bytes so
// far (the lowest on a tie): deterministic, and balanced by bytes.
std::vector<std::vector<DataSegment>> ShareSegments(const std::vector<SizedSegment>& segments,
                                                    int ranks);

// This rank's plan when the job of `files` (the whole job's, in order) resumes the checkpoint
// `c` that c.ranks != comm->size() ranks committed in `ranks_dir`. Each rank works out what
// the old ranks m with m mod N = rank had left; the ranks exchange that, and share it out.
// Refused (InvalidArgument) when the input changed since, naming the file.
StatusOr<SegmentPlan> PlanFileShares(Env* env, Comm* comm, const JobConfig& job,
                                     const std::vector<std::string>& files,
                                     const std::string& ranks_dir, const RanksCheckpoint& c);

}  // namespace ctrbox

#endif  // CTRBOX_JOBS_FILE_SHARES_H_
