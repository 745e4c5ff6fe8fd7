// Snapshots: a node that missed more of the log than the group keeps
// receives a checkpoint of another replica's state and then the log tail;
// nodes are replaced under load. Snapshots are taken every 16 entries here,
// so a few hundred writes are enough to truncate the log past a node.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/testing/http_get.h"

namespace dedup {
namespace {

class SnapshotTest : public ClusterTest {
 protected:
  SnapshotTest()
      : ClusterTest({"--snapshot_threshold=16", "--snapshot_trailing=16",
                     "--metrics_address=127.0.0.1:0"}) {}

  // A sample of node `id`'s /metrics; -1 when absent.
  double Metric(int id, const std::string& series) {
    absl::StatusOr<std::string> page =
        testing::HttpGet(cluster_.process(id)->metrics_port(), "/metrics");
    if (!page.ok()) return -1;
    absl::StatusOr<double> value = testing::SampleValue(*page, series);
    return value.ok() ? *value : -1;
  }
};

TEST_F(SnapshotTest, LaggingFollowerInstallsASnapshotThenTheLog) {
  const int follower = leader_ == 3 ? 2 : 3;
  const auto before = WriteOneByOne(leader_, 20, "early");
  ASSERT_TRUE(cluster_.Stop(follower).ok());
  const auto missed = WriteOneByOne(leader_, 200, "missed");
  ASSERT_EQ(missed.size(), 200u);
  ASSERT_TRUE(cluster_.Start(follower).ok());
  ExpectIdenticalReplicas();
  EXPECT_TRUE(InstalledASnapshot(follower))
      << cluster_.process(follower)->captured_stderr();
  EXPECT_GE(Metric(follower, "dedup_raft_snapshots_installed_total"), 1);
  EXPECT_GE(Metric(leader_, "dedup_raft_snapshots_sent_total"), 1);
  EXPECT_GE(Metric(leader_, "dedup_raft_snapshots_taken_total"), 1);
  EXPECT_EQ(Metric(leader_, "dedup_raft_role{role=\"leader\"}"), 1);
  EXPECT_EQ(Metric(follower, "dedup_raft_role{role=\"follower\"}"), 1);
  EXPECT_EQ(Metric(follower, "dedup_raft_has_leader"), 1);
  EXPECT_GE(Metric(leader_, "dedup_raft_operations_proposed_total"),
            Metric(leader_, "dedup_raft_entries_proposed_total"));
  EXPECT_GE(Metric(leader_, "dedup_raft_entries_proposed_total"), 400);
  // Every proposed entry went through the leader's log and the follower's.
  EXPECT_GE(Metric(leader_, "dedup_raft_log_appended_entries_total"), 400);
  EXPECT_GE(Metric(leader_, "dedup_raft_log_appends_total"), 1);
  // Small entries: the configured counts (the byte budget would allow more).
  EXPECT_EQ(Metric(leader_, "dedup_raft_snapshot_threshold_entries"), 16);
  EXPECT_EQ(Metric(follower, "dedup_raft_snapshot_trailing_entries"), 16);
  EXPECT_LE(Metric(leader_, "dedup_raft_log_appends_total"),
            Metric(leader_, "dedup_raft_log_appended_entries_total"));
  EXPECT_GE(
      Metric(leader_, absl::StrCat("dedup_raft_follower_lag_entries{node=\"",
                                   follower, "\"}")),
      0);
  // Every node went without a leader once, at start-up.
  EXPECT_GE(Metric(follower, "dedup_raft_leaderless_seconds_count"), 1);
  // Later entries apply on top of the installed state.
  const auto after = WriteOneByOne(leader_, 20, "after");
  ExpectIdenticalReplicas();
  // Those went through the follower's own log (what came before may all
  // have arrived inside the snapshot).
  EXPECT_GE(Metric(follower, "dedup_raft_log_appended_entries_total"), 1);
  // The caught-up node leads with everything: make it the only way in.
  const int other = 6 - leader_ - follower;
  cluster_.Kill(leader_);
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  cluster_.Kill(other);
  ASSERT_TRUE(cluster_.Start(other).ok());
  for (const auto* keys : {&before, &missed, &after}) {
    ExpectDuplicates(follower, *keys);
  }
  // Restarted, it keeps what it installed (no second transfer needed).
  ASSERT_TRUE(cluster_.Stop(follower).ok());
  ASSERT_TRUE(cluster_.Start(follower).ok());
  ExpectIdenticalReplicas();
}

TEST_F(SnapshotTest, NodeReplacedUnderLoadCatchesUpAndServes) {
  // A writer keeps Beginning and Completing keys one by one through
  // whichever node leads.
  std::atomic<bool> stop{false};
  std::map<std::string, std::pair<uint64_t, std::string>> written;
  std::thread writer([&] {
    int round = 0;
    while (!stop.load()) {
      const auto keys =
          WriteOneByOne(leader_, 10, absl::StrCat("load", round++, "-"));
      written.insert(keys.begin(), keys.end());
    }
  });
  const int leaving = leader_ == 3 ? 2 : 3;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::RemoveNodeRequest remove;
  remove.set_node_id(leaving);
  v1::RemoveNodeResponse removed;
  grpc::Status s = CallService<v1::Cluster>(cluster_.client_address(leader_),
                                            &v1::Cluster::Stub::RemoveNode,
                                            remove, &removed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(cluster_.Stop(leaving).ok());

  const int joiner = cluster_.AddJoiner();
  ASSERT_TRUE(cluster_.Start(joiner).ok());
  v1::AddNodeRequest add;
  add.set_node_id(joiner);
  add.set_raft_address(cluster_.raft_address(joiner));
  add.set_client_address(cluster_.client_address(joiner));
  v1::AddNodeResponse added;
  s = CallService<v1::Cluster>(cluster_.client_address(leader_),
                               &v1::Cluster::Stub::AddNode, add, &added);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop.store(true);
  writer.join();
  ASSERT_GT(written.size(), 0u);
  ExpectIdenticalReplicas();
  EXPECT_TRUE(InstalledASnapshot(joiner))
      << cluster_.process(joiner)->captured_stderr();

  absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(leader_);
  ASSERT_TRUE(status.ok()) << status.status();
  std::vector<uint64_t> voters;
  for (const auto& m : status->members()) {
    if (m.role() == "voter") voters.push_back(m.id());
  }
  EXPECT_EQ(voters.size(), 3u);
  EXPECT_EQ(std::count(voters.begin(), voters.end(), leaving), 0);
  EXPECT_EQ(std::count(voters.begin(), voters.end(), joiner), 1);

  // The newcomer serves: it takes over leadership and answers every key.
  v1::TransferLeadershipRequest transfer;
  transfer.set_node_id(joiner);
  v1::TransferLeadershipResponse transferred;
  s = CallService<v1::Cluster>(cluster_.client_address(leader_),
                               &v1::Cluster::Stub::TransferLeadership, transfer,
                               &transferred);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(transferred.leader_id(), static_cast<uint64_t>(joiner));
  ExpectDuplicates(joiner, written);
  // The founding members learnt the newcomer's client address through the
  // log: a follower sends callers to it.
  const int founder = leader_;  // led before the transfer
  std::string hint;
  for (int i = 0; i < 50 && hint != cluster_.client_address(joiner); ++i) {
    grpc::ClientContext context;
    context.AddMetadata("dedup-forwarded", "test");  // not forwarded: named
    v1::BeginResponse response;
    grpc::Status s = cluster_.DedupStub(founder)->Begin(
        &context, BeginOf("k", "o"), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    hint = LeaderHint(context);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(hint, cluster_.client_address(joiner));
}

// Every replica tracks the leases of in-flight records from the entries it
// applies: the lease gauges (and the lapsed-lease alert) work in cluster
// mode, on whichever node is scraped.
TEST_F(SnapshotTest, EveryNodeReportsInFlightLeases) {
  v1::BeginResponse begun;
  grpc::Status s =
      Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Begin,
           BeginOf("leased", "w"), &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Polls until `series` reads `want` on every node (followers apply once
  // they learn of the commit), for at most 10 s.
  auto expect_everywhere = [this](const std::string& series, double want) {
    for (int id = 1; id <= 3; ++id) {
      double got = Metric(id, series);
      for (int i = 0; i < 200 && got != want; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        got = Metric(id, series);
      }
      EXPECT_EQ(got, want) << series << " on node " << id;
    }
  };
  expect_everywhere("dedup_inflight_tracking_saturated", 0);
  expect_everywhere("dedup_inflight_leases", 1);
  v1::CompleteRequest complete;
  complete.set_namespace_("cluster");
  complete.set_key("leased");
  complete.set_fence(begun.fence());
  complete.set_outcome(v1::SUCCESS);
  v1::CompleteResponse completed;
  s = Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Complete,
           complete, &completed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  expect_everywhere("dedup_inflight_leases", 0);
}

}  // namespace
}  // namespace dedup
