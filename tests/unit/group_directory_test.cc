// GroupDirectory: hosting that changes while serving, replica and leader
// hints of groups this node stopped hosting, and the shard map epoch rising
// whenever the replicas in this node's view change.
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

TEST_F(GroupDirectoryTest, TheEpochRisesWhenTheReplicasInViewChange) {
  const GroupDirectory::View first = directory_->CurrentView();
  EXPECT_EQ(first.epoch, layout_.epoch);
  ASSERT_EQ(first.groups.size(), 2u);
  EXPECT_EQ(directory_->CurrentView().epoch, first.epoch);  // no change
  // The hosted group's configuration gains the fourth node (a move under
  // way).
  std::vector<uint64_t> voters = layout_.Find(own_)->replicas;
  for (uint64_t id = 1; id <= 4; ++id) {
    if (std::find(voters.begin(), voters.end(), id) == voters.end()) {
      voters.push_back(id);
      break;
    }
  }
  store_.SetVoters(voters, self_);
  const GroupDirectory::View second = directory_->CurrentView();
  EXPECT_EQ(second.epoch, first.epoch + 1);
  for (const GroupPlacement& g : second.groups) {
    if (g.id != own_) continue;
    std::vector<uint64_t> got = g.replicas, want = voters;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
  }
  // Dropped with a hint that differs again: one more.
  voters.erase(std::find(voters.begin(), voters.end(), self_));
  directory_->Unhost(own_, voters, voters.front());
  EXPECT_EQ(directory_->CurrentView().epoch, first.epoch + 2);
  EXPECT_EQ(directory_->CurrentView().epoch, first.epoch + 2);
}

TEST_F(GroupDirectoryTest, AFirstViewAfterAChangeCountsItToo) {
  // A node (re)started once its group's replicas moved: its first map is
  // already past the layout's epoch.
  std::vector<uint64_t> voters = layout_.Find(own_)->replicas;
  voters.back() = voters.back() % 4 + 1;
  while (std::count(voters.begin(), voters.end(), voters.back()) > 1) {
    voters.back() = voters.back() % 4 + 1;
  }
  store_.SetVoters(voters, self_);
  EXPECT_EQ(directory_->CurrentView().epoch, layout_.epoch + 1);
}

}  // namespace
}  // namespace dedup
