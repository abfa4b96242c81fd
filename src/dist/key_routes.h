// The per-pass exchanges of a sparse table partitioned by key over the ranks (HPS §3-4, Algorithms
// 1-2; docs/distributed.md):
//
//   RouteKeys      each rank sends the distinct keys of its pass to their owners (OwnerOf);
//                  an owner serves the union of the keys it was sent.
//   SendToHolders  the owner sends each requester the records (rows) of the keys it asked for.
//   ReduceToHolders  per minibatch: each rank sends the owner a float record per key it touched
//                  (its gradient share); the owner sums each key's records in rank order and
//                  sends the sum to every rank that holds the key this pass, and keeps it for
//                  its own served copy. Every copy of a row then takes the same update.
//
// Thread safety: a KeyRoutes is a value; the functions are collective calls on the Comm.
#ifndef CTRBOX_DIST_KEY_ROUTES_H_
#define CTRBOX_DIST_KEY_ROUTES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "util/status.h"

namespace ctrbox {

struct KeyRoutes {
  int ranks = 1;
  // Requester side. sent[o]: indices (into the keys given to RouteKeys) of the keys sent to
  // owner o, in the order sent; where[i]: key i's owner and position in sent[owner].
  std::vector<std::vector<uint32_t>> sent;
  struct Where {
    uint32_t owner, pos;
  };
  std::vector<Where> where;
  // Owner side. served: the distinct keys this rank serves this pass, in the order RouteKeys
  // was given (ascending by default); asked[r]: per requester r, the index into served of each
  // key r sent, in r's order.
  std::vector<uint64_t> served;
  std::vector<std::vector<uint32_t>> asked;
  // Per served key, the (requester, position in asked[requester]) pairs that hold it:
  // holders[holder_begin[s] .. holder_begin[s + 1]).
  std::vector<uint32_t> holder_begin;
  std::vector<Where> holders;  // {requester, pos}

  // Bytes this rank sent and received in the exchanges that used these routes.
  uint64_t bytes_sent = 0, bytes_received = 0;

  // Scratch of ReduceToHolders: per served key its slot in the sums, or -1.
  std::vector<int32_t> slot_of;
  // Canonical sums (CtrModel::SumOrder): this rank's records of a key are the sums of nodes of
  // a fixed pairwise tree (util/pairwise_sum.h), the first leaf of each in `leaves`
  // (increasing over the ranks in rank order); the reductions take leaves.size() records per
  // touched key, send those that are not all zeros (+0.0: a node without the key) with their
  // leaf, and the owner sums each key's records up the tree, not in rank order.
  bool pairwise = false;
  std::vector<uint32_t> leaves;
  struct Pending {
    uint32_t slot;
    uint32_t leaf;
    const char* record;
  };
  std::vector<Pending> pending;  // scratch of the pairwise sums

  // Owner updates (ReduceToOwners, RefreshHolders). version counts the minibatches reduced;
  // changed_at[s]: the version whose sum served key s last took (0: as pulled); synced[r][p]:
  // the version of the row requester r holds for its key asked[r][p] (0: as pulled).
  uint32_t version = 0;
  std::vector<uint32_t> changed_at;
  std::vector<std::vector<uint32_t>> synced;
};

// Routes n distinct keys. `before` orders the served keys (a strict weak order on keys; the
// default is ascending). Fails if the transport fails.
using KeyOrder = std::function<bool(uint64_t a, uint64_t b)>;
StatusOr<KeyRoutes> RouteKeys(Comm* comm, const uint64_t* keys, size_t n,
                              const KeyOrder& before = nullptr);

// Owner -> requesters: encode(s, out) appends served record s to *out; decode(i, p, n) reads
// the record of the requester's key i from [p, p + n) and returns the bytes it used (0: a
// malformed record, which fails the call).
Status SendToHolders(Comm* comm, KeyRoutes* routes,
                     const std::function<void(uint32_t served, std::string* out)>& encode,
                     const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode);

// Owner -> requesters, for the served keys `subset` only (distinct): each holder of such a key
// gets its record (encode), decoded into the requester's key i (decode, as above). Keys of
// other owners are untouched.
Status SendSomeToHolders(
    Comm* comm, KeyRoutes* routes, const std::vector<uint32_t>& subset,
    const std::function<void(uint32_t served, std::string* out)>& encode,
    const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode);

// The result of one ReduceToHolders on this rank.
struct ReducedRecords {
  // Requester side: (index of the key given to RouteKeys, summed record), for every key of this
  // rank's pass that any rank touched.
  std::vector<uint32_t> keys;
  std::vector<float> records;  // keys.size() x width
  // Owner side: (index into served, summed record) for every served key any rank touched.
  std::vector<uint32_t> served;
  std::vector<float> served_records;
  // Owner side, ReduceToOwners only: per requester r, the positions in asked[r] of the keys r
  // uses in its next minibatch.
  std::vector<std::vector<uint32_t>> next;
};

// Per minibatch. touched[0..m): indices of keys given to RouteKeys (distinct); records: m x
// width floats (m x leaves x width with routes->pairwise). REQUIRES: every rank passes the
// same width.
Status ReduceToHolders(Comm* comm, KeyRoutes* routes, const uint32_t* touched, const float* records,
                       size_t m, uint32_t width, ReducedRecords* out);

// Owner updates (docs/distributed.md, "Owner updates"): only the owner's served copy of a row
// takes the updates, and a holder's copy is refreshed just before the holder uses it. Per
// minibatch, ReduceToOwners sends the owners the records of the keys this rank touched, as
// ReduceToHolders does, with next[0..n_next): the keys (indices given to RouteKeys, distinct)
// this rank uses in its next minibatch. An owner gets the sums (out->served, served_records:
// each key's records summed in rank order, as ReduceToHolders sums them) and, per requester,
// the keys it uses next (out->next); the requester side of *out is left empty. The served keys
// summed are marked changed in this minibatch.
Status ReduceToOwners(Comm* comm, KeyRoutes* routes, const uint32_t* touched, const float* records,
                      size_t m, uint32_t width, const uint32_t* next, size_t n_next,
                      ReducedRecords* out);

// After the owner applied the sums to its served rows: each requester gets the current row
// (encode) of every key it uses next (next, from ReduceToOwners) whose served row changed since
// the requester last had it, decoded into its key i (decode: as SendToHolders). Collective.
Status RefreshHolders(Comm* comm, KeyRoutes* routes, const std::vector<std::vector<uint32_t>>& next,
                      const std::function<void(uint32_t served, std::string* out)>& encode,
                      const std::function<size_t(uint32_t key, const char* p, size_t n)>& decode);

}  // namespace ctrbox

#endif  // CTRBOX_DIST_KEY_ROUTES_H_
