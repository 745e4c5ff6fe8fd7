// dedup-bench's slot routing against a real 3-node, 3-group cluster: with
// --route=shard (and auto, which picks it for several groups) every call
// and every group's slice of a batch reaches its group's leader directly,
// so no node forwards; with --route=fixed the node given forwards the calls
// of the groups it does not lead.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/load/grpc_backend.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_harness.h"
#include "tests/testing/http_get.h"

namespace dedup::bench {
namespace {

using ::dedup::testing::ClusterHarness;

constexpr int kGroups = 3;

class SlotRoutingTest : public ::testing::Test {
 protected:
  SlotRoutingTest()
      : cluster_(3, {absl::StrCat("--groups=", kGroups),
                     "--metrics_address=127.0.0.1:0"}) {}

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    ASSERT_TRUE(PreferredLeadersSettled(std::chrono::seconds(60)));
  }

  v1::ShardMapResponse MapOf(int id) {
    auto stub =
        v1::Cluster::NewStub(testing::TestChannel(cluster_.client_address(id)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::ShardMapResponse map;
    (void)stub->ShardMap(&context, v1::ShardMapRequest(), &map);
    return map;
  }

  // Until every node's map names each group's first replica (its
  // preferred leader, where the balancers leave it) as its leader: calls
  // then meet no transfer.
  bool PreferredLeadersSettled(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool settled = true;
      for (int id = 1; id <= cluster_.size() && settled; ++id) {
        const v1::ShardMapResponse map = MapOf(id);
        settled = map.groups_size() == kGroups;
        for (const v1::ShardGroup& g : map.groups()) {
          settled = settled && g.replicas_size() > 0 &&
                    g.leader_node_id() == g.replicas(0).node_id() &&
                    !g.leader_address().empty();
        }
      }
      if (settled) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // Calls (and sub-batches) every node forwarded so far.
  double Forwarded() {
    double sum = 0;
    for (int id = 1; id <= cluster_.size(); ++id) {
      for (const char* result :
           {"ok", "error", "unavailable", "deadline_exceeded", "cancelled"}) {
        absl::StatusOr<double> v = testing::ScrapeSample(
            cluster_.process(id)->metrics_port(),
            absl::StrCat("dedup_forwarded_calls_total{result=\"", result,
                         "\"}"));
        if (v.ok()) sum += *v;
      }
    }
    return sum;
  }

  // Begins then Completes `n` fresh keys as batches, then one key by unary
  // calls, through `backend`; every answer must be the expected one.
  void Drive(GrpcBackend& backend, const std::string& prefix, int n) {
    std::vector<BeginCall> begins;
    for (int i = 0; i < n; ++i) {
      begins.push_back(BeginCall{absl::StrCat(prefix, i), "h", "owner"});
    }
    std::vector<BeginAnswer> began = Await<std::vector<BeginAnswer>>(
        [&](auto done) { backend.BeginBatch(1, begins, done); });
    ASSERT_EQ(began.size(), begins.size());
    std::vector<CompleteCall> completes;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(began[i].error, "") << i;
      ASSERT_EQ(began[i].status, BeginStatus::kStarted) << i;
      completes.push_back(CompleteCall{begins[i].key, began[i].fence, "r"});
    }
    std::vector<FencedAnswer> completed = Await<std::vector<FencedAnswer>>(
        [&](auto done) { backend.CompleteBatch(0, completes, done); });
    ASSERT_EQ(completed.size(), completes.size());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(completed[i].error, "") << i;
      ASSERT_EQ(completed[i].status, FencedStatus::kOk) << i;
    }
    // Each unary call on its own key: keys of every group.
    for (int i = 0; i < 6; ++i) {
      const std::string key = absl::StrCat(prefix, "unary-", i);
      BeginAnswer b = Await<BeginAnswer>([&](auto done) {
        backend.Begin(0, BeginCall{key, "h", "o"}, done);
      });
      ASSERT_EQ(b.error, "");
      ASSERT_EQ(b.status, BeginStatus::kStarted);
      FencedAnswer r = Await<FencedAnswer>(
          [&](auto done) { backend.Release(1, key, b.fence, done); });
      ASSERT_EQ(r.error, "");
      ASSERT_EQ(r.status, FencedStatus::kOk);
      b = Await<BeginAnswer>([&](auto done) {
        backend.Begin(1, BeginCall{key, "h", "o"}, done);
      });
      ASSERT_EQ(b.error, "");
      FencedAnswer c = Await<FencedAnswer>([&](auto done) {
        backend.Complete(0, CompleteCall{key, b.fence, "r"}, done);
      });
      ASSERT_EQ(c.error, "");
      ASSERT_EQ(c.status, FencedStatus::kOk);
    }
  }

  template <typename T, typename Start>
  static T Await(Start start) {
    absl::Notification answered;
    T answer;
    start([&](T a) {
      answer = std::move(a);
      answered.Notify();
    });
    answered.WaitForNotification();
    return answer;
  }

  ClusterHarness cluster_;
};

TEST_F(SlotRoutingTest, ShardRouteSendsEachSliceToItsLeaderAndFixedForwards) {
  {
    GrpcBackend fixed(cluster_.client_address(1), "bench", 2, 0,
                      RouteMode::kFixed);
    ASSERT_EQ(fixed.Start(), "");
    EXPECT_EQ(fixed.routed_groups(), 0);
    const double before = Forwarded();
    Drive(fixed, "fixed-", 60);
    // Node 1 leads one group of three: it forwarded the others' slices.
    EXPECT_GT(Forwarded(), before);
    fixed.Stop();
  }
  for (RouteMode mode : {RouteMode::kShard, RouteMode::kAuto}) {
    GrpcBackend routed(cluster_.client_address(1), "bench", 2, 0, mode);
    ASSERT_EQ(routed.Start(), "");
    EXPECT_EQ(routed.routed_groups(), kGroups);
    const double before = Forwarded();
    Drive(routed, absl::StrCat("routed-", static_cast<int>(mode), "-"), 60);
    EXPECT_EQ(Forwarded(), before);
    routed.Stop();
  }
}

TEST_F(SlotRoutingTest, CoalescedCallsGoStraightToo) {
  GrpcBackend routed(cluster_.client_address(2), "bench", 1,
                     /*coalesce_in_flight=*/2, RouteMode::kShard);
  ASSERT_EQ(routed.Start(), "");
  // The CoalescingClient's first calls may leave before its own map
  // arrives (they are forwarded then): let it fetch it.
  (void)Await<BeginAnswer>([&](auto done) {
    routed.Begin(0, BeginCall{"warm", "h", "o"}, done);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double before = Forwarded();
  for (int i = 0; i < 12; ++i) {
    const std::string key = absl::StrCat("coalesced-", i);
    BeginAnswer b = Await<BeginAnswer>([&](auto done) {
      routed.Begin(0, BeginCall{key, "h", "o"}, done);
    });
    ASSERT_EQ(b.error, "");
    ASSERT_EQ(b.status, BeginStatus::kStarted);
    FencedAnswer c = Await<FencedAnswer>([&](auto done) {
      routed.Complete(0, CompleteCall{key, b.fence, "r"}, done);
    });
    ASSERT_EQ(c.error, "");
    ASSERT_EQ(c.status, FencedStatus::kOk);
  }
  EXPECT_EQ(Forwarded(), before);
  routed.Stop();
}

}  // namespace
}  // namespace dedup::bench
