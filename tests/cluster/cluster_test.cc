// A 3-node group of real dedupd processes on loopback: every acknowledged
// claim and result survives the loss of any node, replicas stay identical,
// and followers name the leader.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

TEST_F(ClusterTest, FollowersNameTheLeader) {
  const int follower = leader_ == 1 ? 2 : 1;
  auto stub = cluster_.DedupStub(follower);
  grpc::ClientContext context;
  // Forwarded calls are answered so (a client's are forwarded: see
  // forward_test.cc).
  context.AddMetadata("dedup-forwarded", "test");
  v1::BeginResponse response;
  grpc::Status s = stub->Begin(&context, BeginOf("k", "o"), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(LeaderHint(context), cluster_.client_address(leader_));
  EXPECT_NE(s.error_message().find("not the leader"), std::string::npos);
  // A group's first start is not an error: RocksDB used to log "[ERROR]
  // Error when reading .../state dir NotFound" on every new node.
  for (int id = 1; id <= 3; ++id) {
    EXPECT_EQ(cluster_.process(id)->captured_stderr().find(
                  "\"level\":\"error\",\"component\":\"rocksdb\""),
              std::string::npos)
        << "node " << id << ": " << cluster_.process(id)->captured_stderr();
  }
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

// A client as the real ones behave: one channel per node, remembering the
// leader, following dedup-leader, trying the next node when one is gone.
class LeaderFollowingClient {
 public:
  explicit LeaderFollowingClient(const ClusterHarness& cluster) {
    for (int id = 1; id <= cluster.size(); ++id) {
      addresses_.push_back(cluster.client_address(id));
      stubs_.push_back(cluster.DedupStub(id));
    }
  }

  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& request, Response* response) {
    grpc::Status status;
    for (int attempt = 0; attempt < 100; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
      status = ((*stubs_[current_]).*method)(&context, request, response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
      const std::string hint = LeaderHint(context);
      auto it = std::find(addresses_.begin(), addresses_.end(), hint);
      if (it != addresses_.end()) {
        current_ = it - addresses_.begin();
      } else {
        current_ = (current_ + 1) % stubs_.size();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return status;
  }

 private:
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::Dedup::Stub>> stubs_;
  size_t current_ = 0;
};

// SIGTERM on the leader under load: it hands over leadership, answers new
// calls UNAVAILABLE with the new leader's address while in-flight ones
// finish, and only then closes its connections. No call may end CANCELLED
// (a client that gives up on a Complete leaves the claim to a takeover that
// runs the side effect again).
TEST_F(ClusterTest, LeaderStoppedWithSigtermCancelsNoCall) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<grpc::StatusCode, int> codes;
  auto worker = [&](int w) {
    LeaderFollowingClient client(cluster_);
    for (int i = 0; !stop.load(); ++i) {
      const std::string key = absl::StrCat("term-", w, "-", i);
      v1::BeginResponse begun;
      grpc::Status s =
          client.Call(&v1::Dedup::Stub::Begin, BeginOf(key, "o"), &begun);
      if (s.ok()) {
        v1::CompleteRequest complete;
        complete.set_namespace_("cluster");
        complete.set_key(key);
        complete.set_fence(begun.fence());
        complete.set_outcome(v1::SUCCESS);
        v1::CompleteResponse completed;
        s = client.Call(&v1::Dedup::Stub::Complete, complete, &completed);
      }
      std::lock_guard<std::mutex> lock(mu);
      ++codes[s.error_code()];
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < 6; ++w) workers.emplace_back(worker, w);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_TRUE(cluster_.Stop(leader_).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  stop.store(true);
  for (std::thread& t : workers) t.join();
  EXPECT_GT(codes[grpc::StatusCode::OK], 0);
  for (const auto& [code, n] : codes) {
    // OK, or ABORTED for an outcome unknown; never CANCELLED.
    EXPECT_TRUE(code == grpc::StatusCode::OK ||
                code == grpc::StatusCode::ABORTED)
        << "code " << code << " x" << n;
  }
}

}  // namespace
}  // namespace dedup
