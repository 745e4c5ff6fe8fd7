// A 3-node group of real dedupd processes on loopback: every acknowledged
// claim and result survives the loss of any node, replicas stay identical,
// and followers name the leader.
#include <string>

#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

TEST_F(ClusterTest, FollowersNameTheLeader) {
  const int follower = leader_ == 1 ? 2 : 1;
  auto stub = cluster_.DedupStub(follower);
  grpc::ClientContext context;
  v1::BeginResponse response;
  grpc::Status s = stub->Begin(&context, BeginOf("k", "o"), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(LeaderHint(context), cluster_.client_address(leader_));
  EXPECT_NE(s.error_message().find("not the leader"), std::string::npos);
}

TEST_F(ClusterTest, TenThousandKeysReplicateToEveryNode) {
  // Through a follower's address: the writes follow the redirect.
  const int follower = leader_ == 1 ? 2 : 1;
  const auto keys = BeginAndComplete(follower, 10'000, "k");
  ASSERT_EQ(keys.size(), 10'000u);
  for (int id = 1; id <= cluster_.size(); ++id) ExpectDuplicates(id, keys);
  ExpectIdenticalReplicas();
  absl::StatusOr<std::vector<v1::DigestResponse>> digests =
      cluster_.ConvergedDigests();
  ASSERT_TRUE(digests.ok());
  EXPECT_EQ(digests->front().live_records(), 10'000u);
}

TEST_F(ClusterTest, LeaderKilledLosesNoAcknowledgedResult) {
  const auto before = BeginAndComplete(leader_, 300, "a");
  const int old_leader = leader_;
  cluster_.Kill(old_leader);
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_NE(*leader, old_leader);
  ExpectDuplicates(*leader, before);
  const auto after = BeginAndComplete(*leader, 300, "b");
  // Fences keep rising across the leader change.
  uint64_t max_before = 0;
  for (const auto& [key, v] : before)
    max_before = std::max(max_before, v.first);
  for (const auto& [key, v] : after) EXPECT_GT(v.first, max_before);
  // The old leader comes back, catches up, and holds the same state.
  ASSERT_TRUE(cluster_.Start(old_leader).ok());
  ExpectDuplicates(old_leader, after);
  ExpectIdenticalReplicas();
}

TEST_F(ClusterTest, RestartedFollowerCatchesUpFromTheLog) {
  const int follower = leader_ == 3 ? 2 : 3;
  ASSERT_TRUE(cluster_.Stop(follower).ok());
  const auto keys = BeginAndComplete(leader_, 500, "c");
  ASSERT_TRUE(cluster_.Start(follower).ok());
  ExpectIdenticalReplicas();
  // It can lead: hand it the group.
  cluster_.Kill(leader_);
  for (int id = 1; id <= 3; ++id) {
    if (id != follower && id != leader_) cluster_.Kill(id);
  }
  ASSERT_TRUE(cluster_.Start(leader_).ok());
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok());
  ExpectDuplicates(follower, keys);
}

}  // namespace
}  // namespace dedup
