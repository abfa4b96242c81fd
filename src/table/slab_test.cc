#include "table/slab.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "util/random.h"

namespace ctrbox {
namespace {

// The reference: each owner's record holds its own pattern, which no move may change. The
// arena is driven through allocations and frees that rise and fall, and shrunk wherever
// ShrinkLimit says: the owners' ids stay distinct and below the cut, their records keep their
// bytes, the arena's counts stay right, and it keeps working (allocations reuse the holes
// first, then grow it again).
TEST(SlabArenaTest, ShrinkMovesRecordsBitForBitAndGivesSlabsBack) {
  constexpr size_t kWords = 43;  // a default row's embedding and state: slabs of 11 pages
  SlabArena arena(kWords);
  Random rng(7);
  struct Owner {
    uint32_t id;
    uint32_t pattern;
  };
  std::vector<Owner> owners;
  uint32_t next_pattern = 1;
  auto fill = [&](const Owner& o) {
    uint32_t* r = arena.Get(o.id);
    for (size_t w = 0; w < kWords; ++w) r[w] = o.pattern * 2654435761u + static_cast<uint32_t>(w);
  };
  auto check = [&](const char* when) {
    std::set<uint32_t> ids;
    for (const Owner& o : owners) {
      ASSERT_LT(o.id, arena.allocated()) << when;
      ASSERT_TRUE(ids.insert(o.id).second) << when << ": id " << o.id << " held twice";
      const uint32_t* r = arena.Get(o.id);
      for (size_t w = 0; w < kWords; ++w) {
        ASSERT_EQ(r[w], o.pattern * 2654435761u + static_cast<uint32_t>(w))
            << when << ": id " << o.id << " word " << w;
      }
    }
    ASSERT_EQ(arena.live(), owners.size()) << when;
  };
  size_t shrinks = 0, freed = 0;
  for (int round = 0; round < 60; ++round) {
    // Up to ~20 000 records, then down to a few hundred, and up again.
    const size_t want = round % 20 < 10 ? 2000 * (round % 20 + 1) : 300 + rng.Below(2000);
    while (owners.size() < want) {
      owners.push_back({arena.Allocate(), next_pattern++});
      fill(owners.back());
    }
    while (owners.size() > want) {
      const size_t at = rng.Below(owners.size());
      arena.Free(owners[at].id);
      owners[at] = owners.back();
      owners.pop_back();
    }
    check("after allocating and freeing");
    const uint32_t limit = arena.ShrinkLimit();
    ASSERT_LE(limit, arena.allocated());
    ASSERT_GE(limit, arena.live());
    if (limit == arena.allocated()) continue;
    const size_t before = arena.MemoryBytes();
    size_t visited = 0;
    freed += arena.Shrink(limit, [&](auto&& move) {
      for (Owner& o : owners) {
        move(o.id);
        ++visited;
      }
    });
    ++shrinks;
    EXPECT_EQ(visited, owners.size());
    EXPECT_EQ(arena.allocated(), limit);
    EXPECT_LT(arena.MemoryBytes(), before);
    check("after shrinking");
  }
  EXPECT_GT(shrinks, 3u);
  EXPECT_GT(freed, size_t{1} << 20);
}

// ShrinkLimit leaves an arena within an eighth (two slabs at least) of what its live records
// need, and cuts one past that to a sixteenth (one slab at least) above.
TEST(SlabArenaTest, ShrinkLimitLeavesSmallSlackAlone) {
  SlabArena arena(4);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 256 * 40; ++i) ids.push_back(arena.Allocate());  // 40 full slabs
  EXPECT_EQ(arena.ShrinkLimit(), arena.allocated());
  // 34 slabs' worth live: 6 spare slabs, over 34 / 8 = 4: cut to 34 + 2.
  for (int i = 0; i < 256 * 6; ++i) {
    arena.Free(ids.back());
    ids.pop_back();
  }
  EXPECT_EQ(arena.ShrinkLimit(), 256u * 36);
  // 36 slabs live (one more slab's worth): 4 spare, not over 36 / 8 = 4: left alone.
  for (int i = 0; i < 256 * 2; ++i) ids.push_back(arena.Allocate());
  EXPECT_EQ(arena.ShrinkLimit(), arena.allocated());
  // A small arena: 1 record live in 4 slabs: cut to 2 slabs (1 needed, 1 spare).
  SlabArena small(4);
  std::vector<uint32_t> few;
  for (int i = 0; i < 256 * 4; ++i) few.push_back(small.Allocate());
  for (size_t i = 1; i < few.size(); ++i) small.Free(few[i]);
  EXPECT_EQ(small.ShrinkLimit(), 512u);
  uint32_t id = few[0];
  small.Shrink(small.ShrinkLimit(), [&](auto&& move) { move(id); });
  EXPECT_EQ(id, few[0]);  // below the cut already: not moved
  EXPECT_EQ(small.allocated(), 512u);
  EXPECT_EQ(small.live(), 1u);
  // The free ids below the cut are given out before the arena grows again.
  std::set<uint32_t> got;
  for (int i = 0; i < 511; ++i) got.insert(small.Allocate());
  EXPECT_EQ(got.size(), 511u);
  EXPECT_EQ(*got.rbegin(), 511u);
  EXPECT_EQ(got.count(id), 0u);
  EXPECT_EQ(small.Allocate(), 512u);
}

}  // namespace
}  // namespace ctrbox
