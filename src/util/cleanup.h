// Cleanup: runs a callable when it goes out of scope unless Cancel()ed first (absl::Cleanup):
// for removing a partial output on every error path of a function with many returns.
#ifndef CTRBOX_UTIL_CLEANUP_H_
#define CTRBOX_UTIL_CLEANUP_H_

#include <utility>

namespace ctrbox {

template <typename F>
class [[nodiscard]] Cleanup {
 public:
  explicit Cleanup(F f) : f_(std::move(f)) {}
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() {
    if (armed_) f_();
  }
  // The work succeeded: nothing to clean up.
  void Cancel() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_CLEANUP_H_
