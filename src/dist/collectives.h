// Collectives over a Comm with a fixed summation order, so that a job with a fixed number of
// ranks is bit-identical run after run (MPI_Allreduce leaves its order to the library), and
// the key -> owner map of the sparse table partitioned over the ranks (docs/distributed.md).
#ifndef CTRBOX_DIST_COLLECTIVES_H_
#define CTRBOX_DIST_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/comm.h"
#include "util/hash.h"
#include "util/status.h"

namespace ctrbox {

// Sums data[0..n) over the ranks; every rank ends with the sum, element i summed in rank
// order (((x_0 + x_1) + x_2) + ...). Rank c sums the c-th of size() equal chunks and every
// rank gathers them (a reduce-scatter + all-gather: each rank sends and receives about
// 2 n (N - 1) / N elements). REQUIRES: every rank passes the same n.
Status AllReduceSum(Comm* comm, float* data, size_t n);
Status AllReduceSum(Comm* comm, double* data, size_t n);
Status AllReduceSum(Comm* comm, uint64_t* data, size_t n);
// Canonical sums (CtrModel::SumOrder): each rank gives the sums of some nodes of a fixed
// pairwise tree (util/pairwise_sum.h), each named by its first leaf; the nodes of all ranks,
// in rank order, have increasing leaves. Every rank ends with the sum of all the nodes up the
// tree in *out: the same bits as one process adding up the same tree. A rank may give no
// node (its share has no rows). Fails (on the rank that sees it) if the leaves do not increase.
struct TreeNodeSum {
  uint32_t leaf;
  const float* data;  // n elements
};
Status AllReduceSumPairwise(Comm* comm, const std::vector<TreeNodeSum>& mine, size_t n, float* out);
// The largest of the ranks' values, element-wise.
Status AllReduceMax(Comm* comm, uint64_t* data, size_t n);

// The rank that owns `key`'s row among `ranks` (a stable hash: the same key has the same owner
// in every job of this many ranks; independent of the working set's partitions, which use the
// top bits of Mix64(key)). REQUIRES: ranks >= 1.
inline int OwnerOf(uint64_t key, int ranks) {
  const uint64_t h = Mix64(key ^ 0xD15C'0000'0000'0001ULL);
  return static_cast<int>((static_cast<unsigned __int128>(h) * static_cast<uint64_t>(ranks)) >> 64);
}

}  // namespace ctrbox

#endif  // CTRBOX_DIST_COLLECTIVES_H_
