// The founding layout and the checks of layouts from outside.
#include "replication/shard_layout.h"

#include <map>

#include "gtest/gtest.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

TEST(FoundingLayoutTest, GroupsCoverEverySlotInEqualContiguousRanges) {
  absl::StatusOr<ShardLayout> layout =
      FoundingLayout({4, 9, 2, 7, 5, 6}, 12, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(ValidateLayout(*layout).ok());
  EXPECT_EQ(layout->epoch, 1u);
  ASSERT_EQ(layout->groups.size(), 12u);
  for (uint32_t g = 0; g < 12; ++g) {
    const GroupPlacement& group = layout->groups[g];
    EXPECT_EQ(group.id, g);
    const uint32_t size = group.end_slot - group.first_slot;
    EXPECT_TRUE(size == kSlotCount / 12 || size == kSlotCount / 12 + 1);
  }
  EXPECT_EQ(layout->groups.back().end_slot, kSlotCount);
  for (uint32_t slot : {0u, 1365u, 1366u, 8191u, 16383u}) {
    EXPECT_TRUE(layout->GroupOfSlot(slot).Owns(slot)) << slot;
  }
}

TEST(FoundingLayoutTest, ReplicasAndPreferredLeadersAreSpreadEvenly) {
  for (uint32_t groups = 1; groups <= 70; ++groups) {
    absl::StatusOr<ShardLayout> layout =
        FoundingLayout({1, 2, 3, 4, 5, 6}, groups, 3);
    ASSERT_TRUE(layout.ok());
    std::map<uint64_t, uint32_t> leads, replicas;
    for (const GroupPlacement& group : layout->groups) {
      ASSERT_EQ(group.replicas.size(), 3u);
      ASSERT_TRUE(ValidateLayout(*layout).ok());
      ++leads[group.replicas.front()];
      for (uint64_t node : group.replicas) ++replicas[node];
    }
    const uint32_t most_leads = (groups + 5) / 6;
    for (const auto& [node, n] : leads) EXPECT_LE(n, most_leads) << groups;
    for (const auto& [node, n] : replicas) {
      EXPECT_LE(n, (groups * 3 + 5) / 6 + 1) << groups;
    }
    EXPECT_EQ(layout->HostedBy(1).size(), replicas[1]);
  }
}

TEST(FoundingLayoutTest, RefusesWhatCannotBePlaced) {
  EXPECT_FALSE(FoundingLayout({}, 3, 1).ok());
  EXPECT_FALSE(FoundingLayout({1, 1, 2}, 3, 3).ok());
  EXPECT_FALSE(FoundingLayout({0, 1, 2}, 3, 3).ok());
  EXPECT_FALSE(FoundingLayout({1, 2, 3}, 0, 3).ok());
  EXPECT_FALSE(FoundingLayout({1, 2, 3}, kSlotCount + 1, 3).ok());
  EXPECT_FALSE(FoundingLayout({1, 2, 3}, 3, 4).ok());
  EXPECT_FALSE(FoundingLayout({1, 2, 3}, 3, 0).ok());
  EXPECT_TRUE(FoundingLayout({1, 2, 3}, kSlotCount, 1).ok());
}

TEST(ValidateLayoutTest, FindsGapsOverlapsAndBadReplicas) {
  absl::StatusOr<ShardLayout> good = FoundingLayout({1, 2, 3}, 3, 3);
  ASSERT_TRUE(good.ok());
  ShardLayout gap = *good;
  gap.groups[1].first_slot += 1;
  EXPECT_FALSE(ValidateLayout(gap).ok());
  ShardLayout short_end = *good;
  short_end.groups.back().end_slot -= 1;
  EXPECT_FALSE(ValidateLayout(short_end).ok());
  ShardLayout twice = *good;
  twice.groups[2].id = 0;
  EXPECT_FALSE(ValidateLayout(twice).ok());
  ShardLayout repeated = *good;
  repeated.groups[0].replicas = {1, 1};
  EXPECT_FALSE(ValidateLayout(repeated).ok());
  ShardLayout none = *good;
  none.groups[0].replicas.clear();
  EXPECT_FALSE(ValidateLayout(none).ok());
  EXPECT_FALSE(ValidateLayout(ShardLayout()).ok());
}

}  // namespace
}  // namespace dedup
