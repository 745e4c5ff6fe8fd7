// The Begin/Complete/Release/Get/Forget rules of DESIGN.md, end to end.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;
using v1::ReleaseResponse;
using v1::RenewResponse;

class SemanticsTest : public SharedServerTest<SemanticsTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

TEST_F(SemanticsTest, ErrorsAreStoredAndReplayed) {
  const std::string key = TestKey("k");
  const int64_t before = NowMs();
  const BeginResponse r = client().Begin(key, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  EXPECT_GT(r.fence(), 0u);
  EXPECT_FALSE(r.takeover());
  EXPECT_EQ(r.attempts(), 1u);
  EXPECT_GE(r.created_at(), before);
  EXPECT_LE(r.created_at(), NowMs());
  EXPECT_EQ(
      client().Complete(key, r.fence(), "card declined", v1::ERROR).status(),
      CompleteResponse::OK);

  const BeginResponse dup = client().Begin(key, "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.outcome(), v1::ERROR);
  EXPECT_EQ(dup.result(), "card declined");
  EXPECT_EQ(dup.fence(), r.fence());
  EXPECT_EQ(dup.created_at(), r.created_at());
  EXPECT_GE(dup.completed_at(), r.created_at());
  EXPECT_GT(dup.expires_at(), dup.completed_at());
  EXPECT_EQ(dup.attempts(), 1u);
}

TEST_F(SemanticsTest, BinaryResultsRoundTrip) {
  const std::string key = TestKey("k");
  const std::string result("\0\x01\xff{\"ok\":true}\n", 15);
  const BeginResponse r = client().Begin(key, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  ASSERT_EQ(client().Complete(key, r.fence(), result).status(),
            CompleteResponse::OK);
  const BeginResponse dup = client().Begin(key, "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.outcome(), v1::SUCCESS);
  EXPECT_EQ(dup.result(), result);
}

TEST_F(SemanticsTest, ReleaseLetsTheNextBeginStartFresh) {
  const std::string key = TestKey("k");
  const BeginResponse r = client().Begin(key, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  const ReleaseResponse released = client().Release(key, r.fence());
  EXPECT_EQ(released.status(), ReleaseResponse::OK);
  EXPECT_FALSE(client().Get(key).found());
  EXPECT_EQ(client().Release(key, r.fence()).status(),
            ReleaseResponse::NOT_FOUND);
  EXPECT_EQ(client().Complete(key, r.fence(), "x").status(),
            CompleteResponse::NOT_FOUND);

  const BeginResponse again = client().Begin(key, "b");
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_GT(again.fence(), r.fence());
  EXPECT_FALSE(again.takeover());
  EXPECT_EQ(again.attempts(), 1u);

  // A completed outcome is never released.
  ASSERT_EQ(client().Complete(key, again.fence(), "done").status(),
            CompleteResponse::OK);
  EXPECT_EQ(client().Release(key, again.fence()).status(),
            ReleaseResponse::ALREADY_COMPLETED);
  EXPECT_EQ(client().Begin(key, "c").result(), "done");
}

TEST_F(SemanticsTest, SameOwnerReentersWithTheSameFence) {
  const std::string key = TestKey("k");
  const BeginResponse first = client().Begin(key, "owner-a");
  ASSERT_EQ(first.status(), BeginResponse::STARTED);
  const BeginResponse again = client().Begin(key, "owner-a");
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_EQ(again.fence(), first.fence());
  EXPECT_FALSE(again.takeover());
  EXPECT_EQ(again.attempts(), 1u);

  const int64_t before = NowMs();
  const BeginResponse other = client().Begin(key, "owner-b");
  EXPECT_EQ(other.status(), BeginResponse::IN_USE);
  EXPECT_EQ(other.fence(), first.fence());
  EXPECT_GT(other.retry_after_ms(), 0u);
  // Time left on the (default 60 s) lease, capped.
  EXPECT_LE(other.retry_after_ms(), 60000u);
  EXPECT_GT(other.lease_expires_at(), before);
}

TEST_F(SemanticsTest, AnonymousOwnerIsNeverReentrant) {
  const std::string key = TestKey("k");
  const BeginResponse first = client().Begin(key, "");
  ASSERT_EQ(first.status(), BeginResponse::STARTED);
  const BeginResponse again = client().Begin(key, "");
  EXPECT_EQ(again.status(), BeginResponse::IN_USE);
  EXPECT_EQ(again.fence(), first.fence());
}

TEST_F(SemanticsTest, OtherArgsHashConflicts) {
  const std::string key = TestKey("k");
  const BeginResponse r = client().Begin(client().BeginReq(key, "a", "h1"));
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  // In flight: for another owner and for the owner itself.
  EXPECT_EQ(client().Begin(client().BeginReq(key, "b", "h2")).status(),
            BeginResponse::CONFLICT);
  EXPECT_EQ(client().Begin(client().BeginReq(key, "a", "h2")).status(),
            BeginResponse::CONFLICT);
  // Empty is a value like any other.
  EXPECT_EQ(client().Begin(client().BeginReq(key, "b", "")).status(),
            BeginResponse::CONFLICT);
  // Waiting is pointless for a conflict: answered at once.
  v1::BeginRequest waiting = client().BeginReq(key, "b", "h2");
  waiting.set_wait_ms(5000);
  const int64_t before = NowMs();
  EXPECT_EQ(client().Begin(waiting).status(), BeginResponse::CONFLICT);
  EXPECT_LT(NowMs() - before, 1000);

  ASSERT_EQ(client().Complete(key, r.fence(), "done").status(),
            CompleteResponse::OK);
  // Completed.
  EXPECT_EQ(client().Begin(client().BeginReq(key, "c", "h2")).status(),
            BeginResponse::CONFLICT);
  EXPECT_EQ(client().Begin(client().BeginReq(key, "c", "h1")).status(),
            BeginResponse::DUPLICATE);
}

TEST_F(SemanticsTest, OtherArgsHashConflictsEvenAfterLeaseExpiry) {
  const std::string key = TestKey("k");
  v1::BeginRequest req = client().BeginReq(key, "a", "h1");
  req.set_lease_ms(100);
  const BeginResponse r = client().Begin(req);
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  SleepMs(std::max<int64_t>(r.lease_expires_at() - NowMs(), 0) + 50);
  EXPECT_EQ(client().Begin(client().BeginReq(key, "b", "h2")).status(),
            BeginResponse::CONFLICT);
  // The conflicting call did not take the key over.
  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().fence(), r.fence());
  EXPECT_EQ(got.record().args_hash(), "h1");
}

TEST_F(SemanticsTest, CompleteIsIdempotentAndTheFirstResultStays) {
  const std::string key = TestKey("k");
  const BeginResponse r = client().Begin(key, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  const CompleteResponse first = client().Complete(key, r.fence(), "one");
  EXPECT_EQ(first.status(), CompleteResponse::OK);
  EXPECT_EQ(first.fence(), r.fence());
  EXPECT_GT(first.expires_at(), NowMs());
  // The same call repeated (its response was lost, say) is answered OK.
  EXPECT_EQ(client().Complete(key, r.fence(), "one").status(),
            CompleteResponse::OK);

  const CompleteResponse other_result =
      client().Complete(key, r.fence(), "two");
  EXPECT_EQ(other_result.status(), CompleteResponse::ALREADY_COMPLETED);
  EXPECT_GT(other_result.expires_at(), 0);
  EXPECT_EQ(client().Complete(key, r.fence(), "one", v1::ERROR).status(),
            CompleteResponse::ALREADY_COMPLETED);

  const BeginResponse dup = client().Begin(key, "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "one");
  EXPECT_EQ(dup.outcome(), v1::SUCCESS);
}

TEST_F(SemanticsTest, CompleteWithAFenceThatIsNotCurrentIsStale) {
  const std::string key = TestKey("k");
  const BeginResponse r = client().Begin(key, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  const CompleteResponse future = client().Complete(key, r.fence() + 7, "x");
  EXPECT_EQ(future.status(), CompleteResponse::STALE_FENCE);
  EXPECT_EQ(future.fence(), r.fence());
  EXPECT_EQ(client().Renew(key, r.fence() + 7, 1000).status(),
            RenewResponse::STALE_FENCE);
  EXPECT_EQ(client().Release(key, r.fence() + 7).status(),
            ReleaseResponse::STALE_FENCE);
  EXPECT_EQ(client().Get(key).record().state(), v1::IN_FLIGHT);
}

TEST_F(SemanticsTest, CallsOnAMissingKeyAreNotFound) {
  const std::string key = TestKey("never-begun");
  EXPECT_EQ(client().Complete(key, 1, "x").status(),
            CompleteResponse::NOT_FOUND);
  EXPECT_EQ(client().Release(key, 1).status(), ReleaseResponse::NOT_FOUND);
  EXPECT_EQ(client().Renew(key, 1, 1000).status(), RenewResponse::NOT_FOUND);
  EXPECT_FALSE(client().Get(key).found());
  EXPECT_FALSE(client().Forget(key).existed());
  // None of that created a record.
  EXPECT_FALSE(client().Get(key).found());
}

TEST_F(SemanticsTest, GetShowsTheRecordWithoutChangingIt) {
  const std::string key = TestKey("k");
  v1::BeginRequest req = client().BeginReq(key, "owner-a", "hash-1");
  req.set_lease_ms(30000);
  req.set_ttl_s(3600);
  const BeginResponse r = client().Begin(req);
  ASSERT_EQ(r.status(), BeginResponse::STARTED);

  const v1::GetResponse in_flight = client().Get(key);
  ASSERT_TRUE(in_flight.found());
  const v1::Record& rec = in_flight.record();
  EXPECT_EQ(rec.state(), v1::IN_FLIGHT);
  EXPECT_EQ(rec.fence(), r.fence());
  EXPECT_EQ(rec.args_hash(), "hash-1");
  EXPECT_EQ(rec.owner(), "owner-a");
  EXPECT_EQ(rec.outcome(), v1::OUTCOME_UNSPECIFIED);
  EXPECT_EQ(rec.created_at(), r.created_at());
  EXPECT_EQ(rec.completed_at(), 0);
  EXPECT_EQ(rec.lease_expires_at(), r.lease_expires_at());
  EXPECT_EQ(rec.expires_at(), r.expires_at());
  EXPECT_GE(rec.expires_at(), r.created_at() + 3600 * 1000);
  EXPECT_EQ(rec.attempts(), 1u);
  // A read is not a write: a second read sees exactly the same.
  EXPECT_EQ(client().Get(key).record().SerializeAsString(),
            rec.SerializeAsString());

  ASSERT_EQ(client().Complete(key, r.fence(), "res", v1::ERROR).status(),
            CompleteResponse::OK);
  const v1::GetResponse done = client().Get(key);
  ASSERT_TRUE(done.found());
  EXPECT_EQ(done.record().state(), v1::COMPLETED);
  EXPECT_EQ(done.record().outcome(), v1::ERROR);
  EXPECT_EQ(done.record().result(), "res");
  EXPECT_EQ(done.record().fence(), r.fence());
  EXPECT_GE(done.record().completed_at(), r.created_at());
  EXPECT_EQ(done.record().lease_expires_at(), 0);
  // The completed record is kept ttl (from Begin) after Complete.
  EXPECT_GE(done.record().expires_at(),
            done.record().completed_at() + 3600 * 1000);
}

TEST_F(SemanticsTest, ForgetRemovesTheRecordButNotTheFence) {
  const std::string done_key = TestKey("done");
  const BeginResponse r = client().Begin(done_key, "a");
  ASSERT_EQ(client().Complete(done_key, r.fence(), "x").status(),
            CompleteResponse::OK);
  EXPECT_TRUE(client().Forget(done_key).existed());
  EXPECT_FALSE(client().Get(done_key).found());
  EXPECT_FALSE(client().Forget(done_key).existed());
  const BeginResponse again = client().Begin(done_key, "b");
  EXPECT_EQ(again.status(), BeginResponse::STARTED);
  EXPECT_GT(again.fence(), r.fence());

  // Forgetting an in-flight claim: its owner's Complete finds nothing.
  const std::string flying = TestKey("in-flight");
  const BeginResponse f = client().Begin(flying, "a");
  ASSERT_EQ(f.status(), BeginResponse::STARTED);
  EXPECT_TRUE(client().Forget(flying).existed());
  EXPECT_EQ(client().Complete(flying, f.fence(), "x").status(),
            CompleteResponse::NOT_FOUND);
  EXPECT_GT(client().Begin(flying, "b").fence(), f.fence());
}

TEST_F(SemanticsTest, AttemptsCountTakeovers) {
  const std::string key = TestKey("k");
  uint64_t last_fence = 0;
  for (uint32_t attempt = 1; attempt <= 3; ++attempt) {
    v1::BeginRequest req =
        client().BeginReq(key, "owner-" + std::to_string(attempt));
    req.set_lease_ms(100);
    const BeginResponse r = client().Begin(req);
    ASSERT_EQ(r.status(), BeginResponse::STARTED) << "attempt " << attempt;
    EXPECT_EQ(r.attempts(), attempt);
    EXPECT_EQ(r.takeover(), attempt > 1);
    EXPECT_GT(r.fence(), last_fence);
    last_fence = r.fence();
    if (attempt < 3) {
      SleepMs(std::max<int64_t>(r.lease_expires_at() - NowMs(), 0) + 50);
    }
  }
  ASSERT_EQ(client().Complete(key, last_fence, "third time").status(),
            CompleteResponse::OK);
  const BeginResponse dup = client().Begin(key, "x");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.attempts(), 3u);
  EXPECT_EQ(client().Get(key).record().attempts(), 3u);
}

TEST_F(SemanticsTest, NamespacesAreSeparate) {
  TestClient other(server().address(), "other-ns");
  const std::string key = TestKey("shared-name");
  const BeginResponse here = client().Begin(key, "a");
  ASSERT_EQ(here.status(), BeginResponse::STARTED);
  ASSERT_EQ(client().Complete(key, here.fence(), "here").status(),
            CompleteResponse::OK);
  const BeginResponse there = other.Begin(other.BeginReq(key, "b", "other"));
  EXPECT_EQ(there.status(), BeginResponse::STARTED);
  EXPECT_EQ(client().Begin(key, "c").result(), "here");
}

}  // namespace
}  // namespace dedup::testing
