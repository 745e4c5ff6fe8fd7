// The Admin service and the metrics that follow storage: a forced compaction
// drops expired records (seen through Stats, never by reading values), and
// the compaction filter's counter and the lease gauges move on /metrics.
#include <string>

#include "absl/strings/str_cat.h"
#include "dedup/v1/admin.grpc.pb.h"
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

}  // namespace
}  // namespace dedup::testing
