// Records disappear on read once their TTL has passed, and never before the
// lease ends. (Removal by compaction is covered by the storage unit tests.)

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;

class TtlTest : public SharedServerTest<TtlTest> {
 public:
  // TTL expiry itself: without tombstones, an expired record is gone for
  // every call (tombstone_test covers what --tombstone_retention_s keeps).
  static std::vector<std::string> Flags() {
    return {"--durability=none", "--tombstone_retention_s=0"};
  }
};

// Sleeps until the server's clock (which is ours) has passed `at_ms`.
void SleepPast(int64_t at_ms) {
  SleepMs(std::max<int64_t>(at_ms - NowMs(), 0) + 50);
}

BeginResponse BeginShort(TestClient& c, const std::string& key, uint32_t ttl_s,
                         uint32_t lease_ms = 100) {
  v1::BeginRequest req = c.BeginReq(key, "a");
  req.set_ttl_s(ttl_s);
  req.set_lease_ms(lease_ms);
  const BeginResponse r = c.Begin(req);
  EXPECT_EQ(r.status(), BeginResponse::STARTED);
  return r;
}

TEST_F(TtlTest, CompletedRecordIsAbsentOnceItsTtlHasPassed) {
  const std::string key = TestKey("k");
  const BeginResponse r = BeginShort(client(), key, /*ttl_s=*/1);
  const CompleteResponse done = client().Complete(key, r.fence(), "short");
  ASSERT_EQ(done.status(), CompleteResponse::OK);

  const v1::GetResponse live = client().Get(key);
  ASSERT_TRUE(live.found());
  // Kept ttl after Complete (the Begin's ttl, as Complete gave none).
  EXPECT_GE(live.record().expires_at(), live.record().completed_at() + 1000);
  EXPECT_LE(live.record().expires_at(), NowMs() + 1000);
  EXPECT_EQ(done.expires_at(), live.record().expires_at());
  EXPECT_EQ(client().Begin(key, "b").status(), BeginResponse::DUPLICATE);

  SleepPast(done.expires_at());
  EXPECT_FALSE(client().Get(key).found());
  EXPECT_FALSE(client().Forget(key).existed());
  const BeginResponse again = client().Begin(key, "b");
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_FALSE(again.takeover());
  EXPECT_GT(again.fence(), r.fence());
  EXPECT_EQ(again.attempts(), 1u);
}

TEST_F(TtlTest, CompleteTtlOverridesTheBeginTtl) {
  const std::string shortened = TestKey("shortened");
  const std::string lengthened = TestKey("lengthened");
  const BeginResponse s = BeginShort(client(), shortened, /*ttl_s=*/3600);
  const BeginResponse l = BeginShort(client(), lengthened, /*ttl_s=*/1);
  const CompleteResponse s_done =
      client().Complete(shortened, s.fence(), "s", v1::SUCCESS, /*ttl_s=*/1);
  const CompleteResponse l_done =
      client().Complete(lengthened, l.fence(), "l", v1::SUCCESS, /*ttl_s=*/60);
  ASSERT_EQ(s_done.status(), CompleteResponse::OK);
  ASSERT_EQ(l_done.status(), CompleteResponse::OK);
  EXPECT_LE(s_done.expires_at(), NowMs() + 1000);
  EXPECT_GE(l_done.expires_at(), NowMs() + 59000);

  SleepPast(s_done.expires_at());
  EXPECT_FALSE(client().Get(shortened).found());
  EXPECT_EQ(client().Begin(shortened, "b").status(), BeginResponse::STARTED);
  const BeginResponse dup = client().Begin(lengthened, "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "l");
}

TEST_F(TtlTest, ExpiredInFlightRecordIsGone) {
  const std::string key = TestKey("k");
  const BeginResponse r = BeginShort(client(), key, /*ttl_s=*/1);
  SleepPast(r.expires_at());
  EXPECT_FALSE(client().Get(key).found());
  // Its owner's outcome can no longer be recorded.
  EXPECT_EQ(client().Complete(key, r.fence(), "late").status(),
            CompleteResponse::NOT_FOUND);
  const BeginResponse again = client().Begin(key, "b");
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_FALSE(again.takeover());
  EXPECT_GT(again.fence(), r.fence());
  EXPECT_EQ(again.attempts(), 1u);
}

TEST_F(TtlTest, RecordNeverExpiresBeforeItsLeaseEnds) {
  const std::string key = TestKey("k");
  const BeginResponse r =
      BeginShort(client(), key, /*ttl_s=*/1, /*lease_ms=*/2500);
  EXPECT_GE(r.expires_at(), r.lease_expires_at());
  SleepMs(1300);
  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found()) << "expired while its lease was live";
  EXPECT_EQ(got.record().state(), v1::IN_FLIGHT);
  const BeginResponse other = client().Begin(key, "b");
  EXPECT_EQ(other.status(), BeginResponse::IN_USE);
  EXPECT_EQ(client().Complete(key, r.fence(), "in time").status(),
            CompleteResponse::OK);
}

}  // namespace
}  // namespace dedup::testing
