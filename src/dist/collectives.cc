#include "dist/collectives.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/pairwise_sum.h"

namespace ctrbox {
namespace {

// Chunk c of n elements split over N ranks: [n c / N, n (c + 1) / N).
size_t ChunkBegin(size_t n, int c, int N) { return n * static_cast<size_t>(c) / N; }

// Every rank's chunk (this rank's is `mine`) into data[0..n).
template <typename T>
Status GatherChunks(Comm* comm, const std::vector<T>& mine, T* data, size_t n) {
  const int N = comm->size();
  std::vector<std::string> all;
  RETURN_IF_ERROR(comm->AllGather(
      std::string_view(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T)), &all));
  for (int c = 0; c < N; ++c) {
    const size_t cb = ChunkBegin(n, c, N), ce = ChunkBegin(n, c + 1, N);
    if (all[c].size() != (ce - cb) * sizeof(T)) return InternalError("all-reduce: short chunk");
    if (!all[c].empty()) std::memcpy(data + cb, all[c].data(), all[c].size());
  }
  return Status::OK();
}

template <typename T, typename Combine>
Status AllReduceChunks(Comm* comm, T* data, size_t n, Combine combine) {
  const int N = comm->size(), me = comm->rank();
  if (N == 1 || n == 0) return Status::OK();  // every rank passes the same n
  std::vector<std::string> send(N), recv;
  for (int c = 0; c < N; ++c) {
    const size_t b = ChunkBegin(n, c, N), e = ChunkBegin(n, c + 1, N);
    send[c].assign(reinterpret_cast<const char*>(data + b), (e - b) * sizeof(T));
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  const size_t b = ChunkBegin(n, me, N), e = ChunkBegin(n, me + 1, N);
  std::vector<T> mine(e - b);
  std::vector<const T*> parts(N);
  for (int from = 0; from < N; ++from) {
    if (recv[from].size() != mine.size() * sizeof(T)) {
      return InternalError("all-reduce: rank " + std::to_string(from) + " sent " +
                           std::to_string(recv[from].size()) + " bytes for a chunk of " +
                           std::to_string(mine.size() * sizeof(T)));
    }
    parts[from] = reinterpret_cast<const T*>(recv[from].data());
  }
  combine(&mine, parts);
  return GatherChunks(comm, mine, data, n);
}

// combine(mine, parts): this rank's chunk from every rank's part of it (parts[r], r in rank
// order), written into mine.
template <typename T, typename Op>
Status AllReduce(Comm* comm, T* data, size_t n, Op op) {
  return AllReduceChunks<T>(comm, data, n,
                            [&](std::vector<T>* mine, const std::vector<const T*>& parts) {
                              for (size_t from = 0; from < parts.size(); ++from) {
                                const T* x = parts[from];
                                if (from == 0) {
                                  std::copy(x, x + mine->size(), mine->begin());
                                } else {
                                  for (size_t i = 0; i < mine->size(); ++i)
                                    (*mine)[i] = op((*mine)[i], x[i]);
                                }
                              }
                            });
}
}  // namespace

Status AllReduceSum(Comm* comm, float* data, size_t n) {
  return AllReduce(comm, data, n, [](float a, float b) { return a + b; });
}
Status AllReduceSum(Comm* comm, double* data, size_t n) {
  return AllReduce(comm, data, n, [](double a, double b) { return a + b; });
}
Status AllReduceSum(Comm* comm, uint64_t* data, size_t n) {
  return AllReduce(comm, data, n, [](uint64_t a, uint64_t b) { return a + b; });
}
Status AllReduceSumPairwise(Comm* comm, const std::vector<TreeNodeSum>& nodes, size_t n,
                            float* out) {
  const int N = comm->size(), me = comm->rank();
  // To the rank of chunk c: (leaf, the node's chunk c) for every node of this rank.
  std::vector<std::string> send(N), recv;
  for (int c = 0; c < N; ++c) {
    const size_t b = ChunkBegin(n, c, N), e = ChunkBegin(n, c + 1, N);
    for (const TreeNodeSum& node : nodes) {
      send[c].append(reinterpret_cast<const char*>(&node.leaf), sizeof(uint32_t));
      send[c].append(reinterpret_cast<const char*>(node.data + b), (e - b) * sizeof(float));
    }
  }
  RETURN_IF_ERROR(comm->AllToAll(send, &recv));
  const size_t b = ChunkBegin(n, me, N), m = ChunkBegin(n, me + 1, N) - b;
  const size_t entry = sizeof(uint32_t) + m * sizeof(float);
  // The tree's pending sums, in place in the received messages (the lower positions' on the
  // left, as PairwiseStack merges them).
  float* slot[PairwiseStack::kMaxSlots] = {};
  auto merge = [&](int into, int from) {
    float* x = slot[into];
    const float* y = slot[from];
    for (size_t i = 0; i < m; ++i) x[i] += y[i];
  };
  PairwiseStack stack;
  int64_t last = -1;
  for (int from = 0; from < N; ++from) {
    if (recv[from].size() % entry != 0) {
      return InternalError("all-reduce: rank " + std::to_string(from) + " sent " +
                           std::to_string(recv[from].size()) + " bytes, not whole nodes of " +
                           std::to_string(entry));
    }
    for (size_t at = 0; at < recv[from].size(); at += entry) {
      uint32_t leaf;
      std::memcpy(&leaf, recv[from].data() + at, sizeof(leaf));
      if (int64_t{leaf} <= last) {
        return InternalError("all-reduce: rank " + std::to_string(from) + " sent leaf " +
                             std::to_string(leaf) + " after leaf " + std::to_string(last));
      }
      last = leaf;
      slot[stack.Push(leaf, merge)] =
          reinterpret_cast<float*>(recv[from].data() + at + sizeof(uint32_t));
    }
  }
  stack.Finish(merge);
  std::vector<float> mine(m, 0.0f);
  if (!stack.empty()) std::copy(slot[0], slot[0] + m, mine.begin());
  return GatherChunks(comm, mine, out, n);
}
Status AllReduceMax(Comm* comm, uint64_t* data, size_t n) {
  return AllReduce(comm, data, n, [](uint64_t a, uint64_t b) { return std::max(a, b); });
}

}  // namespace ctrbox
