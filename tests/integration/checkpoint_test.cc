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

TEST_F(CheckpointTest, ABatchAnswersEachItemAsAUnaryCallWould) {
  const std::string mine = TestKey("batch-mine");
  const std::string taken = TestKey("batch-taken");
  const BeginResponse b = client().Begin(mine, "w");
  ASSERT_EQ(b.status(), BeginResponse::STARTED);
  v1::BeginRequest short_lease = client().BeginReq(taken, "w1");
  short_lease.set_lease_ms(150);
  const BeginResponse old = client().Begin(short_lease);
  ASSERT_EQ(old.status(), BeginResponse::STARTED);
  SleepMs(old.lease_expires_at() - NowMs() + 50);
  const BeginResponse now = client().Begin(taken, "w2");
  ASSERT_TRUE(now.takeover());

  v1::CheckpointBatchRequest req;
  *req.add_items() = Req(mine, b.fence(), "one", "1");
  *req.add_items() = Req(taken, old.fence(), "stale", "");  // taken over
  *req.add_items() = Req(mine, b.fence(), "", "");          // invalid
  *req.add_items() = Req(TestKey("batch-absent"), 3, "s", "");
  *req.add_items() = Req(mine, b.fence(), "two", "2", /*lease_ms=*/60'000);
  v1::CheckpointBatchResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 10'000);
  const grpc::Status s = client().stub()->CheckpointBatch(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.items_size(), 5);
  EXPECT_EQ(resp.items(0).response().status(), CheckpointResponse::OK);
  EXPECT_EQ(resp.items(1).response().status(), CheckpointResponse::STALE_FENCE);
  EXPECT_EQ(resp.items(1).response().fence(), now.fence());
  ASSERT_TRUE(resp.items(2).has_error());
  EXPECT_EQ(resp.items(2).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(resp.items(2).error().message().rfind("items[2].step: ", 0), 0u)
      << resp.items(2).error().message();
  EXPECT_EQ(resp.items(3).response().status(), CheckpointResponse::NOT_FOUND);
  // Items of one key apply in order: the last one is kept, and its lease.
  EXPECT_EQ(resp.items(4).response().status(), CheckpointResponse::OK);
  EXPECT_GE(resp.items(4).response().lease_expires_at(), NowMs() + 50'000);
  EXPECT_EQ(client().Get(mine).record().checkpoint().step(), "two");
  EXPECT_FALSE(client().Get(taken).record().has_checkpoint());

  // An empty batch is refused as a whole, naming the field.
  v1::CheckpointBatchResponse empty;
  grpc::ClientContext ctx2;
  SetDeadline(&ctx2, 10'000);
  const grpc::Status e = client().stub()->CheckpointBatch(
      &ctx2, v1::CheckpointBatchRequest(), &empty);
  EXPECT_EQ(e.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(e.error_message().rfind("items: must be 1..", 0), 0u)
      << e.error_message();
}

}  // namespace
}  // namespace dedup::testing
