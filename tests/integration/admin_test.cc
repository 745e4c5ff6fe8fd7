// The Admin service and the metrics that follow storage: a forced compaction
// drops expired records (seen through Stats, never by reading values), and
// the compaction filter's counter and the lease gauges move on /metrics.
#include <signal.h>

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"

namespace dedup::testing {
namespace {

v1::StatsResponse Stats(v1::Admin::Stub& admin) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 10'000);
  v1::StatsResponse stats;
  const grpc::Status s = admin.Stats(&ctx, v1::StatsRequest(), &stats);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return stats;
}

double Metric(const ServerProcess& server, const std::string& series) {
  absl::StatusOr<double> value = ScrapeSample(server.metrics_port(), series);
  EXPECT_TRUE(value.ok()) << series << ": " << value.status();
  return value.value_or(-1);
}

TEST(AdminTest, CompactionDropsExpiredRecordsAndCountsThem) {
  // Without tombstones: they keep a completed record's header for
  // --tombstone_retention_s after expiry (tombstone_test covers that).
  DEDUP_START_SERVER(
      server, {"--durability=none", "--compaction_grace_s=0",
               "--metrics_address=127.0.0.1:0", "--tombstone_retention_s=0"});
  ASSERT_GT(server->metrics_port(), 0);
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto admin = v1::Admin::NewStub(channel);
  TestClient c(server->address(), "admin");

  constexpr int kShortLived = 20;
  for (int i = 0; i < kShortLived; ++i) {
    v1::BeginRequest req = c.BeginReq(absl::StrCat("short-", i), "o");
    req.set_ttl_s(1);
    req.set_lease_ms(100);
    const v1::BeginResponse b = c.Begin(req);
    ASSERT_EQ(b.status(), v1::BeginResponse::STARTED);
    ASSERT_EQ(c.Complete(absl::StrCat("short-", i), b.fence(), "r").status(),
              v1::CompleteResponse::OK);
  }
  ASSERT_EQ(c.Begin("long-lived", "o").status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(Stats(*admin).inflight_leases(), 1u);
  EXPECT_EQ(Metric(*server, "dedup_inflight_leases"), 1);
  EXPECT_EQ(Metric(*server, "dedup_expired_dropped_total"), 0);

  SleepMs(1100);  // ttl_s has a 1 s floor: the records expire for real
  EXPECT_FALSE(c.Get("short-0").found()) << "expired record visible";
  EXPECT_EQ(Stats(*admin).expired_dropped(), 0u);

  grpc::ClientContext ctx;
  SetDeadline(&ctx, 60'000);
  v1::CompactResponse compacted;
  const grpc::Status s = admin->Compact(&ctx, v1::CompactRequest(), &compacted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(compacted.expired_dropped(), static_cast<uint64_t>(kShortLived));

  const v1::StatsResponse after = Stats(*admin);
  EXPECT_EQ(after.expired_dropped(), static_cast<uint64_t>(kShortLived));
  EXPECT_EQ(after.inflight_leases(), 1u);
  EXPECT_EQ(Metric(*server, "dedup_expired_dropped_total"), kShortLived);
  EXPECT_EQ(after.begin_outcomes().at("started"), kShortLived + 1u);
  // The live record survived the compaction.
  EXPECT_TRUE(c.Get("long-lived").found());
  c.Disconnect();
  admin.reset();
  channel.reset();
  EXPECT_TRUE(server->Stop().ok());
}

// Admin calls go through the same plumbing as Dedup's: each is timed and
// its errors are counted under its own method label.
TEST(AdminTest, AdminCallsAreCountedInMetrics) {
  DEDUP_START_SERVER(server, {"--metrics_address=127.0.0.1:0"});
  ASSERT_GT(server->metrics_port(), 0);
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto admin = v1::Admin::NewStub(channel);
  const std::string stats_count =
      "dedup_request_duration_seconds_count{method=\"Admin.Stats\"}";
  const std::string reload_count =
      "dedup_request_duration_seconds_count{method=\"Admin.ReloadPolicy\"}";
  const std::string reload_errors =
      "dedup_grpc_errors_total{code=\"FAILED_PRECONDITION\",method=\"Admin."
      "ReloadPolicy\"}";
  EXPECT_EQ(Metric(*server, stats_count), 0);
  EXPECT_EQ(Metric(*server, reload_count), 0);
  Stats(*admin);
  Stats(*admin);
  {
    // No --policy_file: FAILED_PRECONDITION.
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::ReloadPolicyResponse response;
    EXPECT_EQ(admin->ReloadPolicy(&ctx, v1::ReloadPolicyRequest(), &response)
                  .error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  EXPECT_EQ(Metric(*server, stats_count), 2);
  EXPECT_EQ(Metric(*server, reload_count), 1);
  EXPECT_EQ(Metric(*server, reload_errors), 1);
  admin.reset();
  channel.reset();
  EXPECT_TRUE(server->Stop().ok());
}

// Draining, the Admin service refuses new calls like Dedup's: UNAVAILABLE
// saying the server is shutting down (retryable), before the port closes.
TEST(AdminTest, AdminCallDuringLameDuckIsUnavailable) {
  DEDUP_START_SERVER(server, {"--lame_duck_ms=3000"});
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto admin = v1::Admin::NewStub(channel);
  Stats(*admin);  // connected
  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  grpc::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    SleepMs(20);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 2'000);
    v1::StatsResponse response;
    refused = admin->Stats(&ctx, v1::StatsRequest(), &response);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "shutting down"))
      << refused.error_message();
  EXPECT_TRUE(server->WaitForExit(std::chrono::seconds(20)));
  EXPECT_EQ(server->exit_code(), 0);
}

// The Cluster service (a group of one here) goes through the same plumbing:
// calls timed, invalid requests and errors counted by method, and new calls
// refused UNAVAILABLE in the lame duck.
TEST(AdminTest, ClusterCallsAreCountedAndRefusedInTheLameDuck) {
  const std::string client = absl::StrCat("127.0.0.1:", FreePort("127.0.0.1"));
  const std::string raft = absl::StrCat("127.0.0.1:", FreePort("127.0.0.1"));
  DEDUP_START_SERVER(server,
                     {"--address=" + client, "--node_id=1",
                      "--peers=1=" + raft + "=" + client, "--event_log=off",
                      "--metrics_address=127.0.0.1:0", "--lame_duck_ms=3000"});
  ASSERT_GT(server->metrics_port(), 0);
  auto channel =
      grpc::CreateChannel(client, grpc::InsecureChannelCredentials());
  auto cluster = v1::Cluster::NewStub(channel);
  auto status = [&cluster] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 2'000);
    v1::ClusterStatusResponse response;
    return cluster->Status(&ctx, v1::ClusterStatusRequest(), &response);
  };
  ASSERT_TRUE(status().ok());
  ASSERT_TRUE(status().ok());
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 2'000);
    v1::AddNodeResponse response;
    EXPECT_EQ(
        cluster->AddNode(&ctx, v1::AddNodeRequest(), &response).error_code(),
        grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Metric(*server,
                   "dedup_request_duration_seconds_count{method=\""
                   "Cluster.Status\"}"),
            2);
  EXPECT_EQ(Metric(*server,
                   "dedup_invalid_requests_total{field=\"node_id\","
                   "method=\"Cluster.AddNode\"}"),
            1);
  EXPECT_EQ(Metric(*server,
                   "dedup_grpc_errors_total{code=\"INVALID_ARGUMENT\","
                   "method=\"Cluster.AddNode\"}"),
            1);

  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  grpc::Status refused;
  // The hand-off attempt of a leader without peers comes first (<= 3 s).
  for (int i = 0; i < 300 && refused.ok(); ++i) {
    SleepMs(20);
    refused = status();
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "shutting down"))
      << refused.error_message();
  {
    // A new checkpoint stream too: a draining node does not start copying a
    // database it is about to stop serving (the fetching node tries another).
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 2'000);
    auto reader = cluster->FetchCheckpoint(&ctx, v1::FetchCheckpointRequest());
    v1::CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    const grpc::Status fetched = reader->Finish();
    EXPECT_EQ(fetched.error_code(), grpc::StatusCode::UNAVAILABLE)
        << fetched.error_message();
    EXPECT_TRUE(absl::StrContains(fetched.error_message(), "shutting down"))
        << fetched.error_message();
  }
  EXPECT_TRUE(server->WaitForExit(std::chrono::seconds(20)));
  EXPECT_EQ(server->exit_code(), 0);
}

}  // namespace
}  // namespace dedup::testing
