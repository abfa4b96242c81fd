#include "dist/mpi_comm.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#ifdef CTRBOX_HAVE_MPI
#include <mpi.h>
#endif

namespace ctrbox {

bool LaunchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

#ifdef CTRBOX_HAVE_MPI

bool HaveMpi() { return true; }

namespace {

Status MpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return IOError(std::string("MPI: ") + call + " failed: " + std::string(text, len));
}

#define CTRBOX_MPI(call)                                 \
  do {                                                   \
    const int _rc = (call);                              \
    if (_rc != MPI_SUCCESS) return MpiError(#call, _rc); \
  } while (0)

// Channel 0 (the root) owns the others, each a duplicate of MPI_COMM_WORLD, and finalises
// MPI when it is destroyed.
class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size, double timeout_seconds, MPI_Comm comm, MpiComm* root)
      : rank_(rank), size_(size), timeout_seconds_(timeout_seconds), comm_(comm), root_(root) {}
  ~MpiComm() override {
    if (root_ != this) return;
    for (auto& c : owned_) MPI_Comm_free(&c->comm_);
    owned_.clear();
    MPI_Finalize();
  }

  // Makes this the root and opens channels 1.. (collective: every rank opens them in the same
  // order).
  Status SetRootAndOpenChannels() {
    root_ = this;
    channels_.push_back(this);
    for (int c = 1; c < kChannels; ++c) {
      MPI_Comm dup;
      CTRBOX_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
      owned_.push_back(std::make_unique<MpiComm>(rank_, size_, timeout_seconds_, dup, this));
      channels_.push_back(owned_.back().get());
    }
    return Status::OK();
  }

  Comm* channel(int c) override { return root_->channels_[c]; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view transport() const override { return "mpi"; }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    std::vector<int> scount(size_), rcount(size_), sdisp(size_), rdisp(size_);
    std::string sbuf;
    for (int r = 0; r < size_; ++r) {
      RETURN_IF_ERROR(CheckCount(sbuf.size() + send[r].size()));
      sdisp[r] = static_cast<int>(sbuf.size());
      scount[r] = static_cast<int>(send[r].size());
      sbuf += send[r];
    }
    MPI_Request req;
    CTRBOX_MPI(MPI_Ialltoall(scount.data(), 1, MPI_INT, rcount.data(), 1, MPI_INT, comm_, &req));
    RETURN_IF_ERROR(Wait(&req));
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      rdisp[r] = static_cast<int>(total);
      total += static_cast<size_t>(rcount[r]);
      RETURN_IF_ERROR(CheckCount(total));
    }
    std::string rbuf(total, '\0');
    CTRBOX_MPI(MPI_Ialltoallv(sbuf.data(), scount.data(), sdisp.data(), MPI_BYTE, rbuf.data(),
                              rcount.data(), rdisp.data(), MPI_BYTE, comm_, &req));
    RETURN_IF_ERROR(Wait(&req));
    recv->resize(size_);
    for (int r = 0; r < size_; ++r) (*recv)[r].assign(rbuf.data() + rdisp[r], rcount[r]);
    return Status::OK();
  }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    RETURN_IF_ERROR(CheckCount(mine.size()));
    const int n = static_cast<int>(mine.size());
    std::vector<int> counts(size_), disp(size_);
    MPI_Request req;
    CTRBOX_MPI(MPI_Iallgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_, &req));
    RETURN_IF_ERROR(Wait(&req));
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      disp[r] = static_cast<int>(total);
      total += static_cast<size_t>(counts[r]);
      RETURN_IF_ERROR(CheckCount(total));
    }
    std::string buf(total, '\0');
    CTRBOX_MPI(MPI_Iallgatherv(mine.data(), n, MPI_BYTE, buf.data(), counts.data(), disp.data(),
                               MPI_BYTE, comm_, &req));
    RETURN_IF_ERROR(Wait(&req));
    all->resize(size_);
    for (int r = 0; r < size_; ++r) (*all)[r].assign(buf.data() + disp[r], counts[r]);
    return Status::OK();
  }

  // The rank's error goes to its stderr first: MPI_Abort ends the process.
  void Abort(const Status& why) override {
    std::fprintf(stderr, "ctrbox: error: %s\n", why.ToString().c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  // Polls a non-blocking collective until it completes, or fails with NoAnswer once
  // timeout_seconds pass (the caller aborts the job, which ends the request too). Spins for
  // the first ~0.1 ms (a minibatch's exchange on fast links), then sleeps between polls.
  Status Wait(MPI_Request* req) const {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      CTRBOX_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
      if (done) return Status::OK();
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_seconds_) return NoAnswer(timeout_seconds_, -1);
      if (polls > 200)
        std::this_thread::sleep_for(std::chrono::microseconds(polls > 2000 ? 500 : 20));
    }
  }

  // MPI-3 counts are ints: one exchange moves less than 2 GiB per rank.
  static Status CheckCount(size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return ResourceExhaustedError("MPI: one exchange of " + std::to_string(bytes) +
                                    " bytes is over the 2 GiB an MPI-3 call moves; lower "
                                    "pipeline.pass_examples");
    }
    return Status::OK();
  }

  const int rank_, size_;
  const double timeout_seconds_;
  MPI_Comm comm_;
  MpiComm* root_;
  // The root's: its channels ([0] itself), and those it owns (1..).
  std::vector<MpiComm*> channels_;
  std::vector<std::unique_ptr<MpiComm>> owned_;
};

}  // namespace

StatusOr<std::unique_ptr<Comm>> OpenMpiWorld(double timeout_seconds) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return FailedPreconditionError("MPI is already initialised in this process");
  int provided = 0;
  CTRBOX_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return FailedPreconditionError(
        "MPI: this MPI library cannot be called from several threads "
        "one at a time (MPI_THREAD_SERIALIZED)");
  }
  // Errors come back as codes (and so as a Status naming the call), not as an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto root = std::make_unique<MpiComm>(rank, size, timeout_seconds, MPI_COMM_WORLD, nullptr);
  RETURN_IF_ERROR(root->SetRootAndOpenChannels());
  return std::unique_ptr<Comm>(std::move(root));
}

#else  // !CTRBOX_HAVE_MPI

bool HaveMpi() { return false; }

StatusOr<std::unique_ptr<Comm>> OpenMpiWorld(double) {
  return FailedPreconditionError(
      "this ctrbox was built without MPI (install libopenmpi-dev and rebuild: scripts/setup)");
}

#endif

}  // namespace ctrbox
