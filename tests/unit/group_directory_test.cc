// GroupDirectory: hosting that changes while serving, replica and leader
// hints of groups this node stopped hosting, and the shard map it serves:
// the layout until it adopts the meta group's stored map, then that map.
#include "server/group_directory.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/unit/inert_store.h"

namespace dedup {
namespace {

// A replica whose status the test sets; nothing else is called.
class StatusOnlyStore final : public testing::InertStoreOf<ReplicatedStore> {
 public:
  ClusterStatus status;

  ClusterStatus GetClusterStatus() const override { return status; }
  void SetVoters(const std::vector<uint64_t>& ids, uint64_t leader) {
    status.consensus.members.clear();
    for (uint64_t id : ids) {
      Member m;
      m.id = id;
      m.role = MemberRole::kVoter;
      status.consensus.members.push_back(m);
    }
    status.consensus.leader_id = leader;
  }

  absl::StatusOr<StateDigest> Digest() override { return StateDigest(); }
  absl::Status CheckDiskSpace() const override { return absl::OkStatus(); }
  absl::StatusOr<OutgoingCheckpoint> CreateOutgoingCheckpoint() override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<ReplicatedState::StoredShardMap> StoredShardMap() override {
    return ReplicatedState::StoredShardMap();
  }
  void ProposeShardMap(uint64_t, uint64_t, std::string,
                       StoreCallback<bool>) override {}
  void AddMember(ClusterNode, Done) override {}
  void RemoveMember(uint64_t, Done) override {}
  void TransferLeadership(uint64_t, Done) override {}
};

std::vector<ClusterNode> Peers() {
  std::vector<ClusterNode> peers;
  for (uint64_t id = 1; id <= 4; ++id) {
    peers.push_back({id, "127.0.0.1:1", "10.0.0." + std::to_string(id) + ":5"});
  }
  return peers;
}

// 4 nodes, groups 0 and 1 of 3 replicas; this node hosts one of them.
class GroupDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2, 3, 4}, 2, 3);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    for (uint64_t id = 1; id <= 4 && self_ == 0; ++id) {
      if (layout_.HostedBy(id).size() == 1) self_ = id;
    }
    ASSERT_NE(self_, 0u);
    own_ = layout_.HostedBy(self_).front();
    foreign_ = 1 - own_;
    const GroupPlacement& own = *layout_.Find(own_);
    store_.SetVoters(own.replicas, own.replicas.front());
    directory_ = std::make_unique<GroupDirectory>(
        self_, layout_, Peers(),
        std::map<uint32_t, ReplicatedStore*>{{own_, &store_}});
  }

  ShardLayout layout_;
  uint64_t self_ = 0;
  uint32_t own_ = 0;
  uint32_t foreign_ = 0;
  StatusOnlyStore store_;
  std::unique_ptr<GroupDirectory> directory_;
};

TEST_F(GroupDirectoryTest, AGroupHostedWhileServingAnswersFromItsReplica) {
  EXPECT_EQ(directory_->Hosted(foreign_), nullptr);
  EXPECT_EQ(directory_->NotHosted(foreign_).code(),
            absl::StatusCode::kUnavailable);
  StatusOnlyStore joined;
  std::vector<uint64_t> voters = layout_.Find(foreign_)->replicas;
  voters.pop_back();
  voters.push_back(self_);
  joined.SetVoters(voters, voters.front());
  directory_->Host(foreign_, &joined);
  EXPECT_EQ(directory_->Hosted(foreign_), &joined);
  EXPECT_EQ(directory_->hosted().size(), 2u);
  EXPECT_EQ(directory_->LeaderOf(foreign_).id, voters.front());
  std::vector<uint64_t> replicas = directory_->ReplicasOf(foreign_);
  std::sort(replicas.begin(), replicas.end());
  std::sort(voters.begin(), voters.end());
  EXPECT_EQ(replicas, voters);
  EXPECT_TRUE(directory_->HostedOrNotFound(foreign_).ok());
}

TEST_F(GroupDirectoryTest, AnUnhostedGroupIsRefusedWithItsHintNeverItself) {
  // This node leaves its group for the node that did not host it.
  const std::vector<uint64_t> own = layout_.Find(own_)->replicas;
  std::vector<uint64_t> after = own;
  after.erase(std::find(after.begin(), after.end(), self_));
  for (uint64_t id = 1; id <= 4; ++id) {
    if (std::find(own.begin(), own.end(), id) == own.end()) after.push_back(id);
  }
  // A leader hint naming this node itself is dropped.
  directory_->Unhost(own_, after, self_);
  EXPECT_EQ(directory_->Hosted(own_), nullptr);
  EXPECT_EQ(directory_->HostedOrNotFound(own_).status().code(),
            absl::StatusCode::kNotFound);
  std::vector<uint64_t> replicas = directory_->ReplicasOf(own_);
  std::sort(replicas.begin(), replicas.end());
  std::vector<uint64_t> want = after;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(replicas, want);
  const GroupDirectory::Leader leader = directory_->LeaderOf(own_);
  EXPECT_NE(leader.id, self_);
  EXPECT_NE(leader.id, 0u);
  const absl::Status refusal = directory_->NotHosted(own_);
  EXPECT_EQ(refusal.code(), absl::StatusCode::kUnavailable);
  auto hint = refusal.GetPayload(kLeaderAddressPayload);
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(std::string(*hint), leader.address);

  directory_->Unhost(foreign_, after, after.back());
  EXPECT_EQ(directory_->LeaderOf(foreign_).id, after.back());
}

TEST_F(GroupDirectoryTest, ServesTheLayoutUntilAMapIsAdoptedThenTheMap) {
  // Before any stored map: the layout, whatever the live voters say.
  std::vector<uint64_t> voters = layout_.Find(own_)->replicas;
  uint64_t joiner = 0;
  for (uint64_t id = 1; id <= 4 && joiner == 0; ++id) {
    if (std::find(voters.begin(), voters.end(), id) == voters.end()) {
      joiner = id;
    }
  }
  voters.push_back(joiner);
  store_.SetVoters(voters, self_);
  GroupDirectory::View view = directory_->CurrentView();
  EXPECT_EQ(view.epoch, layout_.epoch);
  EXPECT_EQ(directory_->epoch(), layout_.epoch);
  ASSERT_EQ(view.groups.size(), 2u);
  EXPECT_EQ(view.groups[own_].replicas, layout_.Find(own_)->replicas);
  EXPECT_FALSE(directory_->Adopted().has_value());

  // A stored map: its epoch and replicas, for hosted and other groups
  // alike (not the live voters: every node serves the same map).
  ShardLayout stored = layout_;
  stored.epoch = layout_.epoch + 3;
  stored.groups[foreign_].replicas = {joiner, self_};
  stored.groups[own_].replicas = {joiner};
  ASSERT_TRUE(directory_->Adopt(stored));
  view = directory_->CurrentView();
  EXPECT_EQ(view.epoch, stored.epoch);
  EXPECT_EQ(directory_->epoch(), stored.epoch);
  ASSERT_EQ(view.groups.size(), 2u);
  EXPECT_EQ(view.groups[foreign_].replicas,
            (std::vector<uint64_t>{joiner, self_}));
  EXPECT_EQ(view.groups[own_].replicas, std::vector<uint64_t>{joiner});
  // Routing still follows the hosted group's live voters, in the map's
  // order first; another group's replicas are the map's.
  EXPECT_EQ(directory_->ReplicasOf(own_).front(), joiner);
  EXPECT_EQ(directory_->ReplicasOf(own_).size(), voters.size());
  EXPECT_EQ(directory_->ReplicasOf(foreign_),
            (std::vector<uint64_t>{joiner, self_}));

  // Maps only move forward.
  ShardLayout older = layout_;
  older.epoch = stored.epoch - 1;
  EXPECT_FALSE(directory_->Adopt(older));
  EXPECT_FALSE(directory_->Adopt(stored));
  EXPECT_EQ(directory_->CurrentView().epoch, stored.epoch);
  EXPECT_EQ(directory_->CurrentView().groups[own_].replicas,
            std::vector<uint64_t>{joiner});
}

TEST_F(GroupDirectoryTest, TheFoundingMapIsAdoptedAtTheLayoutsEpoch) {
  // A node whose layout names no replicas (a joiner) learns them from the
  // founding map stored at the layout's epoch.
  ShardLayout empty = layout_;
  for (GroupPlacement& g : empty.groups) g.replicas.clear();
  GroupDirectory joiner(self_, empty, Peers(), {});
  EXPECT_TRUE(joiner.CurrentView().groups[0].replicas.empty());
  ShardLayout older = layout_;
  older.epoch = layout_.epoch - 1;
  EXPECT_FALSE(joiner.Adopt(older));
  ASSERT_TRUE(joiner.Adopt(layout_));
  EXPECT_EQ(joiner.CurrentView().groups[0].replicas,
            layout_.groups[0].replicas);
  EXPECT_EQ(joiner.epoch(), layout_.epoch);
}

TEST_F(GroupDirectoryTest, AHintLastsUntilANewerMapArrives) {
  std::vector<uint64_t> after = layout_.Find(foreign_)->replicas;
  after.pop_back();
  directory_->Unhost(foreign_, after, after.front());
  EXPECT_EQ(directory_->ReplicasOf(foreign_), after);
  // The map catches up with a different set: the map wins.
  ShardLayout stored = layout_;
  stored.epoch = layout_.epoch + 1;
  stored.groups[foreign_].replicas = {self_};
  ASSERT_TRUE(directory_->Adopt(stored));
  EXPECT_EQ(directory_->ReplicasOf(foreign_), std::vector<uint64_t>{self_});
}

}  // namespace
}  // namespace dedup
