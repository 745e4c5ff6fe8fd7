// Checkpoint: the owner of an execution records its progress, and whoever
// takes the execution over receives the last checkpoint in its STARTED
// answer, so it resumes instead of starting from scratch.
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CheckpointResponse;

class CheckpointTest : public SharedServerTest<CheckpointTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }

  grpc::Status Call(const v1::CheckpointRequest& req,
                    CheckpointResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    return client().stub()->Checkpoint(&ctx, req, resp);
  }
  v1::CheckpointRequest Req(const std::string& key, uint64_t fence,
                            const std::string& step, const std::string& data,
                            uint32_t lease_ms = 0) {
    v1::CheckpointRequest req;
    req.set_namespace_(client().ns());
    req.set_key(key);
    req.set_fence(fence);
    req.set_step(step);
    req.set_data(data);
    req.set_lease_ms(lease_ms);
    return req;
  }
  CheckpointResponse Checkpoint(const v1::CheckpointRequest& req) {
    CheckpointResponse resp;
    const grpc::Status s = Call(req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
};

TEST_F(CheckpointTest, ATakeoverResumesFromTheLastCheckpoint) {
  const std::string key = TestKey("order");
  v1::BeginRequest first = client().BeginReq(key, "worker-1");
  first.set_lease_ms(300);
  const BeginResponse b = client().Begin(first);
  ASSERT_EQ(b.status(), BeginResponse::STARTED);
  EXPECT_FALSE(b.has_checkpoint());
  ASSERT_EQ(Checkpoint(Req(key, b.fence(), "reserved", "stock=3")).status(),
            CheckpointResponse::OK);
  const CheckpointResponse charged =
      Checkpoint(Req(key, b.fence(), "charged", std::string("ch_1\0x", 6)));
  ASSERT_EQ(charged.status(), CheckpointResponse::OK);
  EXPECT_EQ(charged.fence(), b.fence());
  EXPECT_EQ(charged.lease_expires_at(), b.lease_expires_at());

  // The owner re-entering sees it; Get shows it.
  const BeginResponse reentry = client().Begin(first);
  EXPECT_EQ(reentry.status(), BeginResponse::STARTED);
  EXPECT_EQ(reentry.checkpoint().step(), "charged");
  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().checkpoint().step(), "charged");

  SleepMs(b.lease_expires_at() - NowMs() + 50);
  const BeginResponse takeover = client().Begin(key, "worker-2");
  ASSERT_EQ(takeover.status(), BeginResponse::STARTED);
  EXPECT_TRUE(takeover.takeover());
  EXPECT_GT(takeover.fence(), b.fence());
  ASSERT_TRUE(takeover.has_checkpoint());
  EXPECT_EQ(takeover.checkpoint().step(), "charged");
  EXPECT_EQ(takeover.checkpoint().data(), std::string("ch_1\0x", 6));
  EXPECT_EQ(takeover.checkpoint().fence(), b.fence());
  EXPECT_GT(takeover.checkpoint().recorded_at(), 0);

  // The old owner's progress is refused now; the new owner's is kept.
  const CheckpointResponse stale =
      Checkpoint(Req(key, b.fence(), "shipped", ""));
  EXPECT_EQ(stale.status(), CheckpointResponse::STALE_FENCE);
  EXPECT_EQ(stale.fence(), takeover.fence());
  EXPECT_EQ(Checkpoint(Req(key, takeover.fence(), "shipped", "")).status(),
            CheckpointResponse::OK);
  EXPECT_EQ(client().Get(key).record().checkpoint().step(), "shipped");

  // Completing drops it; later checkpoints are refused.
  ASSERT_EQ(client().Complete(key, takeover.fence(), "done").status(),
            v1::CompleteResponse::OK);
  EXPECT_FALSE(client().Get(key).record().has_checkpoint());
  EXPECT_EQ(Checkpoint(Req(key, takeover.fence(), "again", "")).status(),
            CheckpointResponse::ALREADY_COMPLETED);
  EXPECT_EQ(Checkpoint(Req(TestKey("absent"), 5, "s", "")).status(),
            CheckpointResponse::NOT_FOUND);
}

TEST_F(CheckpointTest, ACheckpointWithLeaseRenewsIt) {
  const std::string key = TestKey("renewing");
  v1::BeginRequest req = client().BeginReq(key, "w");
  req.set_lease_ms(200);
  const BeginResponse b = client().Begin(req);
  ASSERT_EQ(b.status(), BeginResponse::STARTED);
  const CheckpointResponse c =
      Checkpoint(Req(key, b.fence(), "step", "", /*lease_ms=*/5000));
  ASSERT_EQ(c.status(), CheckpointResponse::OK);
  EXPECT_GE(c.lease_expires_at(), b.lease_expires_at() + 4000);
  SleepMs(300);  // past the first lease
  EXPECT_EQ(client().Begin(key, "other").status(), BeginResponse::IN_USE);
}

TEST_F(CheckpointTest, BadCheckpointsNameTheFieldAndRule) {
  const std::string key = TestKey("bad");
  const BeginResponse b = client().Begin(key, "w");
  struct Case {
    v1::CheckpointRequest req;
    std::string message;
  } cases[] = {
      {Req(key, 0, "s", ""), "fence: required"},
      {Req(key, b.fence(), "", ""), "step: must be 1..128 bytes, got 0"},
      {Req(key, b.fence(), std::string(129, 's'), ""),
       "step: must be 1..128 bytes, got 129"},
      {Req(key, b.fence(), "bad\nstep", ""), "step: "},
      {Req(key, b.fence(), "s", std::string(65537, 'd')),
       "data: at most 65536 bytes, got 65537"},
      {Req(key, b.fence(), "s", "", 50), "lease_ms: must be 100..3600000"},
  };
  for (const Case& c : cases) {
    CheckpointResponse resp;
    const grpc::Status s = Call(c.req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message().rfind(c.message, 0), 0u)
        << s.error_message() << " vs " << c.message;
  }
  // Nothing was recorded.
  EXPECT_FALSE(client().Get(key).record().has_checkpoint());
}

}  // namespace
}  // namespace dedup::testing
