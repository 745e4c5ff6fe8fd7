// A completed record leaves a tombstone for --tombstone_retention_s after it
// expires: a late retry answers EXPIRED (when and how the operation ran)
// instead of running the side effect again, unless it says accept_rerun.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;

// Sleeps until the server's clock (which is ours) has passed `at_ms`.
void SleepPast(int64_t at_ms) {
  SleepMs(std::max<int64_t>(at_ms - NowMs(), 0) + 50);
}

// Begin (ttl 1 s) + Complete with `result`; returns the completed fence and
// the record's expiry.
struct Done {
  uint64_t fence = 0;
  int64_t expires_at = 0;
  int64_t completed_at = 0;
};
Done RunOnce(TestClient& c, const std::string& key, const std::string& result,
             v1::Outcome outcome = v1::SUCCESS) {
  v1::BeginRequest req = c.BeginReq(key, "first");
  req.set_ttl_s(1);
  req.set_lease_ms(100);
  const BeginResponse b = c.Begin(req);
  EXPECT_EQ(b.status(), BeginResponse::STARTED);
  const v1::CompleteResponse done = c.Complete(key, b.fence(), result, outcome);
  EXPECT_EQ(done.status(), v1::CompleteResponse::OK);
  const v1::GetResponse got = c.Get(key);
  EXPECT_TRUE(got.found());
  return Done{b.fence(), done.expires_at(), got.record().completed_at()};
}

TEST(TombstoneTest, ALateRetryIsExpiredNotRunAgain) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  TestClient c(server->address(), "tomb");
  const Done done = RunOnce(c, "invoice-7", "sent", v1::ERROR);
  SleepPast(done.expires_at);
  EXPECT_FALSE(c.Get("invoice-7").found());

  const BeginResponse late = c.Begin("invoice-7", "retry");
  EXPECT_EQ(late.status(), BeginResponse::EXPIRED);
  EXPECT_EQ(late.fence(), done.fence);
  EXPECT_EQ(late.outcome(), v1::ERROR);
  EXPECT_EQ(late.completed_at(), done.completed_at);
  EXPECT_EQ(late.attempts(), 1u);
  EXPECT_TRUE(late.result().empty());
  // Kept the default 7 days after expiry.
  EXPECT_EQ(late.tombstone_expires_at(), done.expires_at + 7 * 86400 * 1000LL);
  // Nothing was started: asking again gives the same answer.
  EXPECT_EQ(c.Begin("invoice-7", "retry").status(), BeginResponse::EXPIRED);

  // Other arguments on a tombstone: CONFLICT, as on a live record.
  v1::BeginRequest other = c.BeginReq("invoice-7", "retry", "other-args");
  EXPECT_EQ(c.Begin(other).status(), BeginResponse::CONFLICT);
  other.set_accept_rerun(true);
  EXPECT_EQ(c.Begin(other).status(), BeginResponse::CONFLICT);

  // accept_rerun: STARTED again, higher fence, attempts go on.
  v1::BeginRequest rerun = c.BeginReq("invoice-7", "retry");
  rerun.set_accept_rerun(true);
  const BeginResponse again = c.Begin(rerun);
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_TRUE(again.rerun());
  EXPECT_FALSE(again.takeover());
  EXPECT_GT(again.fence(), done.fence);
  EXPECT_EQ(again.attempts(), 2u);
  EXPECT_EQ(c.Complete("invoice-7", again.fence(), "sent again").status(),
            v1::CompleteResponse::OK);
  const BeginResponse dup = c.Begin("invoice-7", "third");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "sent again");

  c.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

TEST(TombstoneTest, ForgetRemovesTheTombstoneToo) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  TestClient c(server->address(), "tomb");
  const Done done = RunOnce(c, "k", "r");
  SleepPast(done.expires_at);
  ASSERT_EQ(c.Begin("k", "x").status(), BeginResponse::EXPIRED);
  EXPECT_FALSE(c.Forget("k").existed());  // no live record
  const BeginResponse fresh = c.Begin("k", "x");
  EXPECT_EQ(fresh.status(), BeginResponse::STARTED);
  EXPECT_FALSE(fresh.rerun());
  EXPECT_GT(fresh.fence(), done.fence);
  EXPECT_EQ(fresh.attempts(), 1u);
  c.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

TEST(TombstoneTest, TombstonesSurviveARestart) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-tombstone");
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::Cleanup remove_dir = [&] { std::filesystem::remove_all(*dir); };
  Done done;
  {
    DEDUP_START_SERVER(server, {}, *dir);  // durable
    if (server->pid() < 0) GTEST_SKIP() << "restarts one node";
    TestClient c(server->address(), "tomb");
    done = RunOnce(c, "k", "r");
    SleepPast(done.expires_at);
    c.Disconnect();
    ASSERT_TRUE(server->Stop().ok());
  }
  DEDUP_START_SERVER(server, {}, *dir);
  TestClient c(server->address(), "tomb");
  const BeginResponse late = c.Begin("k", "x");
  EXPECT_EQ(late.status(), BeginResponse::EXPIRED);
  EXPECT_EQ(late.fence(), done.fence);
  c.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

// Compactions shrink an expired record into its tombstone (the result goes)
// and drop the tombstone once its retention has passed; both are counted.
TEST(TombstoneTest, CompactionShrinksThenDropsTombstones) {
  DEDUP_START_SERVER(
      server, {"--durability=none", "--compaction_grace_s=0",
               "--tombstone_retention_s=3", "--metrics_address=127.0.0.1:0"});
  if (server->pid() < 0) GTEST_SKIP() << "reads one node's metrics";
  TestClient c(server->address(), "tomb");
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto admin = v1::Admin::NewStub(channel);
  auto compact = [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 60'000);
    v1::CompactResponse r;
    const grpc::Status s = admin->Compact(&ctx, v1::CompactRequest(), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r;
  };
  auto sst_bytes = [&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::StatsResponse stats;
    EXPECT_TRUE(admin->Stats(&ctx, v1::StatsRequest(), &stats).ok());
    return stats.live_sst_bytes();
  };
  auto metric = [&](const std::string& series) {
    return ScrapeSample(server->metrics_port(), series).value_or(-1);
  };
  constexpr int kRecords = 10;
  // Incompressible results, so their bytes show in the table files.
  std::string big(100'000, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& ch : big) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ch = static_cast<char>(x);
  }
  int64_t last_expiry = 0;
  for (int i = 0; i < kRecords; ++i) {
    last_expiry = RunOnce(c, "k" + std::to_string(i), big).expires_at;
  }
  compact();  // while live: kept whole
  EXPECT_GT(sst_bytes(), kRecords * 100'000u);
  EXPECT_EQ(metric("dedup_tombstones_made_total"), 0);

  SleepPast(last_expiry);
  const v1::CompactResponse shrunk = compact();
  EXPECT_EQ(shrunk.expired_dropped(), 0u);
  EXPECT_EQ(metric("dedup_tombstones_made_total"), kRecords);
  EXPECT_LT(sst_bytes(), 100'000u) << "tombstones kept their results";
  const BeginResponse late = c.Begin("k0", "x");
  EXPECT_EQ(late.status(), BeginResponse::EXPIRED);
  EXPECT_TRUE(late.result().empty());

  SleepPast(last_expiry + 3000);  // every tombstone's retention has passed
  EXPECT_EQ(c.Begin("k1", "x").status(), BeginResponse::STARTED)
      << "a tombstone outlived its retention";
  const v1::CompactResponse dropped = compact();
  EXPECT_EQ(dropped.expired_dropped(), kRecords - 1u);  // k1 started again
  EXPECT_EQ(metric("dedup_tombstones_dropped_total"), kRecords - 1);
  EXPECT_EQ(metric("dedup_begin_total{outcome=\"expired\"}"), 1);
  admin.reset();
  channel.reset();
  c.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

}  // namespace
}  // namespace dedup::testing
