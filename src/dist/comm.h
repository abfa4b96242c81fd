// Comm: the ranks of one distributed job and the collective exchanges they make
// (docs/distributed.md). Two transports implement it: MPI (mpi_comm.h, the ranks of an
// `mpirun` job) and LocalGroup (below: ranks as threads of one process, for tests).
//
// Every call is collective: every rank of the group makes the same calls in the same order,
// and a call returns on a rank once that rank's share of the exchange is complete. A rank
// that fails stops the others through Abort (the MPI transport: the job ends). A call that
// waits longer than the transport's timeout for the other ranks (one hangs, or its machine
// stopped answering) fails with ResourceExhausted saying so; the caller then aborts the job.
// A rank has kChannels independent channels (channel(c)): exchanges on different channels
// never match each other, so the pipeline's stages can exchange at once, each on its own.
// Thread safety: one channel is used by one thread at a time; different channels of a rank
// may be used concurrently.
#ifndef CTRBOX_DIST_COMM_H_
#define CTRBOX_DIST_COMM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/mutex.h"
#include "util/status.h"

namespace ctrbox {

// The error of an exchange that waited timeout_seconds for `missing` ranks (or an unknown
// number: -1).
Status NoAnswer(double timeout_seconds, int missing);

class Comm {
 public:
  static constexpr int kChannels = 5;

  virtual ~Comm() = default;

  // This rank's channel c (0: this one). REQUIRES: 0 <= c < kChannels.
  virtual Comm* channel(int c) = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi" or "local": for logs and reports.
  virtual std::string_view transport() const = 0;

  // All-to-all with any sizes: send[r] goes to rank r; on return (*recv)[r] holds what rank r
  // sent to this one (send[rank()] comes back as it is). Fails if the transport fails or the
  // group was aborted. REQUIRES: send.size() == size().
  virtual Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) = 0;
  // Every rank's `mine`, in rank order.
  virtual Status AllGather(std::string_view mine, std::vector<std::string>* all) = 0;
  // Tells every rank that this one failed with `why`: their calls in progress and later fail
  // with it (MPI: MPI_Abort ends the job). Never blocks.
  virtual void Abort(const Status& why) = 0;
};

// A rank's error as the job reports it: "rank R of N: ..." (unchanged on one rank, and for an
// error that already names a rank: another rank's abort).
Status OnRank(const Comm& comm, const Status& s);

// N ranks as N threads of one process: rank r's endpoint is rank(r), to be driven by one
// thread (per channel). For tests and for a job that simulates ranks on one machine.
// Thread safety: each endpoint's channel by one thread; Abort from any thread.
class LocalGroup {
 public:
  // REQUIRES: n >= 1, timeout_seconds > 0.
  explicit LocalGroup(int n, double timeout_seconds = 600);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  Comm* rank(int r);
  int size() const { return n_; }
  // Why the group stopped: the first abort (a rank's, or an exchange's timeout: NoAnswer),
  // or OK while none happened.
  Status aborted() const;

 private:
  class Endpoint;
  friend class Endpoint;
  // The meeting point of one channel's exchanges.
  struct Hub {
    explicit Hub(int n) : outbox(n) {}
    mutable Mutex mu;
    CondVar cv{&mu};
    uint64_t generation GUARDED_BY(mu) = 0;
    int arrived GUARDED_BY(mu) = 0;
    Status aborted GUARDED_BY(mu);
    // outbox[from][to]: written by `from` before the first barrier of an exchange, read by
    // `to` between its two barriers.
    std::vector<std::vector<std::string>> outbox;
  };
  // Waits until every rank arrived at the hub's barrier of this generation (or the group
  // aborted, or the timeout passed: then the group aborts).
  Status Barrier(Hub* hub);
  void Abort(const Status& why);

  const int n_;
  const double timeout_seconds_;
  std::vector<std::unique_ptr<Hub>> hubs_;                    // per channel
  std::vector<std::vector<std::unique_ptr<Endpoint>>> ends_;  // [channel][rank]
};

}  // namespace ctrbox

#endif  // CTRBOX_DIST_COMM_H_
