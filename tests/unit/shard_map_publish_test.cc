// Writing the meta group's shard map: a group's new replicas merged into a
// map (order kept, epoch + 1, nothing when unchanged), the compare-and-set
// loop against a stored map that other writers move, and the map a
// Cluster.ShardMap answer describes.
#include "server/shard_map_publish.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "replication/shard_layout_codec.h"
#include "server/shard_map_watch.h"
#include "tests/unit/inert_store.h"

namespace dedup {
namespace {

ShardLayout Founding() {
  absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2, 3, 4}, 2, 3);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

TEST(WithGroupReplicas, KeepsTheOrderOfTheReplicasKeptAndRaisesTheEpoch) {
  const ShardLayout map = Founding();
  const std::vector<uint64_t> before = map.Find(0)->replicas;  // 3 of 1..4
  uint64_t joiner = 0;
  for (uint64_t id = 1; id <= 4; ++id) {
    if (std::find(before.begin(), before.end(), id) == before.end()) {
      joiner = id;
    }
  }
  // The first replica leaves, the joiner comes: the others keep their
  // order (the second is now the preferred leader), the joiner goes last.
  std::vector<uint64_t> voters = {joiner, before[2], before[1]};
  absl::StatusOr<ShardLayout> next = WithGroupReplicas(map, 0, voters);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->epoch, map.epoch + 1);
  EXPECT_EQ(next->Find(0)->replicas,
            (std::vector<uint64_t>{before[1], before[2], joiner}));
  // The other group and the ranges are untouched.
  EXPECT_EQ(next->Find(1)->replicas, map.Find(1)->replicas);
  EXPECT_EQ(next->Find(0)->first_slot, map.Find(0)->first_slot);
  EXPECT_EQ(next->Find(0)->end_slot, map.Find(0)->end_slot);
  EXPECT_TRUE(ValidateLayout(*next).ok());

  // The same set in another order changes nothing.
  std::vector<uint64_t> same = before;
  std::reverse(same.begin(), same.end());
  next = WithGroupReplicas(map, 0, same);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->epoch, map.epoch);
  EXPECT_EQ(next->Find(0)->replicas, before);
}

TEST(WithGroupReplicas, RefusesWhatIsNoReplicaSet) {
  const ShardLayout map = Founding();
  EXPECT_EQ(WithGroupReplicas(map, 7, {1}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(WithGroupReplicas(map, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WithGroupReplicas(map, 0, {1, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WithGroupReplicas(map, 0, {2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// group 0's replica as far as the map goes: a stored map with kSetShardMap's
// compare-and-set, applied at once; `interfere` writes first (another
// writer) the next `interfere` times a proposal comes.
class MapStore final : public testing::InertStoreOf<ReplicatedStore> {
 public:
  int interfere = 0;
  int proposals = 0;

  absl::StatusOr<ReplicatedState::StoredShardMap> StoredShardMap() override {
    absl::MutexLock lock(&mu_);
    return stored_;
  }
  void ProposeShardMap(uint64_t expected, uint64_t epoch, std::string map,
                       StoreCallback<bool> done) override {
    absl::StatusOr<bool> outcome = true;
    {
      absl::MutexLock lock(&mu_);
      ++proposals;
      if (interfere > 0) {
        --interfere;
        // Another writer moves the other group's replicas first.
        ShardLayout other =
            stored_.epoch == 0 ? Founding() : *DecodeShardLayout(stored_.map);
        other.groups[1].replicas = {4};
        other.epoch = std::max<uint64_t>(stored_.epoch, other.epoch) + 1;
        stored_ = {other.epoch, EncodeShardLayout(other)};
      }
      if (expected != stored_.epoch || epoch <= stored_.epoch) {
        outcome = absl::FailedPreconditionError("epoch moved");
      } else {
        stored_ = {epoch, std::move(map)};
      }
    }
    std::move(done)(outcome);
  }

  ClusterStatus GetClusterStatus() const override { return ClusterStatus(); }
  absl::StatusOr<StateDigest> Digest() override { return StateDigest(); }
  absl::Status CheckDiskSpace() const override { return absl::OkStatus(); }
  absl::StatusOr<OutgoingCheckpoint> CreateOutgoingCheckpoint() override {
    return absl::UnimplementedError("");
  }
  void AddMember(ClusterNode, Done) override {}
  void RemoveMember(uint64_t, Done) override {}
  void TransferLeadership(uint64_t, Done) override {}

  ShardLayout Stored() {
    absl::MutexLock lock(&mu_);
    return *DecodeShardLayout(stored_.map);
  }

 private:
  absl::Mutex mu_;
  ReplicatedState::StoredShardMap stored_;
};

TEST(SetGroupReplicasOn, FoundsTheMapThenChangesOneGroupByCas) {
  MapStore meta;
  const ShardLayout founding = Founding();
  // Nothing stored: the founding layout with the group's new replicas.
  absl::StatusOr<uint64_t> epoch =
      SetGroupReplicasOn(meta, founding, 0, {1, 2, 4}, absl::Seconds(5));
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(*epoch, founding.epoch + 1);
  ShardLayout stored = meta.Stored();
  EXPECT_EQ(stored.epoch, *epoch);
  std::vector<uint64_t> got = stored.Find(0)->replicas;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(stored.Find(1)->replicas, founding.Find(1)->replicas);

  // Again: nothing proposed, the same epoch.
  const int proposals = meta.proposals;
  epoch = SetGroupReplicasOn(meta, founding, 0, {4, 2, 1}, absl::Seconds(5));
  ASSERT_TRUE(epoch.ok());
  EXPECT_EQ(*epoch, stored.epoch);
  EXPECT_EQ(meta.proposals, proposals);

  // Another writer moves the epoch under the first try: read again, and
  // neither change is lost.
  meta.interfere = 1;
  epoch = SetGroupReplicasOn(meta, founding, 0, {1, 2}, absl::Seconds(5));
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(*epoch, stored.epoch + 2);
  stored = meta.Stored();
  EXPECT_EQ(stored.epoch, *epoch);
  got = stored.Find(0)->replicas;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(stored.Find(1)->replicas, std::vector<uint64_t>{4});
}

TEST(ProposeFoundingMap, AStoredMapWins) {
  MapStore meta;
  const ShardLayout founding = Founding();
  ASSERT_TRUE(
      SetGroupReplicasOn(meta, founding, 1, {4}, absl::Seconds(5)).ok());
  absl::Status outcome;
  ProposeFoundingMap(meta, founding, [&](absl::StatusOr<bool> stored) {
    outcome = stored.status();
  });
  EXPECT_EQ(outcome.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(meta.Stored().Find(1)->replicas, std::vector<uint64_t>{4});
}

TEST(LayoutOfShardMap, ReadsAnAnswerAndRefusesAnInvalidOne) {
  const ShardLayout founding = Founding();
  v1::ShardMapResponse response;
  response.set_epoch(5);
  for (const GroupPlacement& g : founding.groups) {
    v1::ShardGroup* out = response.add_groups();
    out->set_group_id(g.id);
    out->set_first_slot(g.first_slot);
    out->set_end_slot(g.end_slot);
    for (uint64_t id : g.replicas) out->add_replicas()->set_node_id(id);
  }
  absl::StatusOr<ShardLayout> map = LayoutOfShardMap(response);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch, 5u);
  ASSERT_EQ(map->groups.size(), founding.groups.size());
  EXPECT_EQ(map->groups[1].replicas, founding.groups[1].replicas);
  response.mutable_groups(1)->set_end_slot(7);  // a gap
  EXPECT_FALSE(LayoutOfShardMap(response).ok());
}

}  // namespace
}  // namespace dedup
