// Repairing the stored shard map from a group leader's voters: which groups
// disagree (as sets, order aside), and that a write happens only after two
// looks in a row saw the same disagreement.
#include "server/shard_map_repair.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dedup {
namespace {

ShardLayout TwoGroups() {
  ShardLayout map;
  map.epoch = 7;
  map.groups = {{0, 0, 8192, {1, 2, 3}}, {1, 8192, 16384, {2, 3, 4}}};
  return map;
}

TEST(Disagreeing, ComparesVotersAsSetsAndOnlyForGroupsInTheMap) {
  const ShardLayout map = TwoGroups();
  // Same set in another order: agrees. Group 9 is not in the map.
  EXPECT_TRUE(Disagreeing(map, {{0, {3, 1, 2}}, {9, {1}}}).empty());
  const LedVoters out = Disagreeing(map, {{0, {1, 2, 3}}, {1, {4, 3, 5}}});
  EXPECT_EQ(out, (LedVoters{{1, {3, 4, 5}}}));
}

struct Written {
  uint32_t group_id;
  std::vector<uint64_t> voters;
  bool operator==(const Written& o) const {
    return group_id == o.group_id && voters == o.voters;
  }
};

TEST(ShardMapRepair, WritesOnlyADisagreementSeenTwiceInARow) {
  std::vector<Written> written;
  ShardMapRepair repair(
      [&written](uint32_t group_id, const std::vector<uint64_t>& voters) {
        written.push_back({group_id, voters});
        return absl::StatusOr<uint64_t>(8);
      });
  const ShardLayout map = TwoGroups();
  // A change that just committed, its own write not landed yet: wait.
  EXPECT_EQ(repair.Look(map, {{1, {2, 3, 5}}}), 0);
  // The voters moved again meanwhile: still not the same disagreement.
  EXPECT_EQ(repair.Look(map, {{1, {3, 4, 5}}}), 0);
  EXPECT_TRUE(written.empty());
  // Seen twice with the same voters: written.
  EXPECT_EQ(repair.Look(map, {{1, {5, 3, 4}}}), 1);
  EXPECT_EQ(written, (std::vector<Written>{{1, {3, 4, 5}}}));
  // Once the map agrees, nothing more; a look between two disagreements
  // that agreed starts the count again.
  ShardLayout repaired = map;
  repaired.groups[1].replicas = {3, 4, 5};
  EXPECT_EQ(repair.Look(repaired, {{1, {3, 4, 5}}}), 0);
  EXPECT_EQ(repair.Look(map, {{1, {3, 4, 5}}}), 0);
  EXPECT_EQ(written.size(), 1u);
}

TEST(ShardMapRepair, AFailedWriteIsTriedAgainOnTheNextLook) {
  int calls = 0;
  ShardMapRepair repair([&calls](uint32_t, const std::vector<uint64_t>&) {
    ++calls;
    return calls == 1 ? absl::StatusOr<uint64_t>(
                            absl::UnavailableError("no leader in group 0"))
                      : absl::StatusOr<uint64_t>(9);
  });
  const ShardLayout map = TwoGroups();
  const LedVoters led = {{0, {1, 2, 4}}};
  EXPECT_EQ(repair.Look(map, led), 0);
  EXPECT_EQ(repair.Look(map, led), 0);  // written, failed
  EXPECT_EQ(repair.Look(map, led), 1);  // written again
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace dedup
