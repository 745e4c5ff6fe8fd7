// Every row of DESIGN.md's Begin table and every Complete/Release/Renew rule,
// against the pure state machine with explicit times.
#include "storage/authority.h"

#include <optional>

#include "gtest/gtest.h"

namespace dedup {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kLeaseMs = 10'000;
constexpr uint32_t kTtlS = 3600;

class AuthorityTest : public ::testing::Test {
 protected:
  BeginParams Params(const std::string& owner, const std::string& hash = "h1") {
    BeginParams p;
    p.args_hash = hash;
    p.owner = owner;
    p.lease_ms = kLeaseMs;
    p.ttl_s = kTtlS;
    return p;
  }

  BeginDecision Begin(const std::optional<Record>& stored,
                      const BeginParams& params, int64_t now) {
    return DecideBegin(stored, params, now, [this] { return ++last_fence_; });
  }

  // A record claimed by `owner` at kT0.
  Record InFlight(const std::string& owner = "a") {
    BeginDecision d = Begin(std::nullopt, Params(owner), kT0);
    EXPECT_EQ(d.status, BeginStatus::kStarted);
    return d.record;
  }

  Record Completed(Outcome outcome = Outcome::kSuccess,
                   const std::string& result = "r") {
    Record in_flight = InFlight();
    CompleteParams c;
    c.fence = in_flight.fence;
    c.outcome = outcome;
    c.result = result;
    FencedDecision d = DecideComplete(in_flight, c, kT0 + 100);
    EXPECT_EQ(d.status, FencedStatus::kOk);
    return d.record;
  }

  uint64_t last_fence_ = 41;
};

TEST_F(AuthorityTest, AbsentRecordStartsWithNewFence) {
  BeginDecision d = Begin(std::nullopt, Params("a"), kT0);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_FALSE(d.takeover);
  EXPECT_FALSE(d.reentry);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_EQ(d.record.fence, 42u);
  EXPECT_EQ(d.record.attempts, 1u);
  EXPECT_EQ(d.record.state, RecordState::kInFlight);
  EXPECT_EQ(d.record.owner, "a");
  EXPECT_EQ(d.record.created_at_ms, kT0);
  EXPECT_EQ(d.record.lease_until_ms, kT0 + kLeaseMs);
  EXPECT_EQ(d.record.expire_at_ms, kT0 + kTtlS * 1000);
}

TEST_F(AuthorityTest, ExpiredRecordIsAbsentAndStartsWithHigherFence) {
  const Record done = Completed();
  const int64_t after_expiry = done.expire_at_ms;
  for (const char* hash : {"h1", "other"}) {
    BeginDecision d = Begin(done, Params("b", hash), after_expiry);
    EXPECT_EQ(d.status, BeginStatus::kStarted) << hash;
    EXPECT_GT(d.record.fence, done.fence);
    EXPECT_FALSE(d.takeover);
    EXPECT_EQ(d.record.created_at_ms, after_expiry);
  }
  // One millisecond before expiry it is still a duplicate.
  EXPECT_EQ(Begin(done, Params("b"), after_expiry - 1).status,
            BeginStatus::kDuplicate);
}

TEST_F(AuthorityTest, SameOwnerLiveLeaseReentersWithSameFence) {
  const Record r = InFlight("a");
  BeginDecision d = Begin(r, Params("a"), kT0 + 5);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_TRUE(d.reentry);
  EXPECT_FALSE(d.takeover);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.record.fence, r.fence);
  EXPECT_EQ(d.record.attempts, 1u);
}

TEST_F(AuthorityTest, SameOwnerOtherArgsConflicts) {
  BeginDecision d = Begin(InFlight("a"), Params("a", "h2"), kT0 + 5);
  EXPECT_EQ(d.status, BeginStatus::kConflict);
  EXPECT_EQ(d.write, WriteKind::kNone);
}

TEST_F(AuthorityTest, OtherOwnerLiveLeaseIsInUseWithRetryAfter) {
  const Record r = InFlight("a");
  BeginDecision d = Begin(r, Params("b"), kT0 + kLeaseMs - 300);
  EXPECT_EQ(d.status, BeginStatus::kInUse);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.retry_after_ms, 300);
  EXPECT_EQ(d.record.fence, r.fence);
  // Capped so callers re-check while a long lease runs.
  EXPECT_EQ(Begin(r, Params("b"), kT0 + 1).retry_after_ms, kMaxRetryAfterMs);
}

TEST_F(AuthorityTest, AnonymousOwnerIsNeverReentrant) {
  const Record r = InFlight("");
  EXPECT_EQ(Begin(r, Params(""), kT0 + 1).status, BeginStatus::kInUse);
}

TEST_F(AuthorityTest, OtherOwnerOtherArgsConflicts) {
  EXPECT_EQ(Begin(InFlight("a"), Params("b", "h2"), kT0 + 1).status,
            BeginStatus::kConflict);
}

TEST_F(AuthorityTest, ExpiredLeaseIsTakenOverWithHigherFence) {
  const Record r = InFlight("a");
  const int64_t now = r.lease_until_ms;  // lease ends exactly now
  BeginDecision d = Begin(r, Params("b"), now);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_TRUE(d.takeover);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_GT(d.record.fence, r.fence);
  EXPECT_EQ(d.record.owner, "b");
  EXPECT_EQ(d.record.attempts, 2u);
  EXPECT_EQ(d.record.created_at_ms, r.created_at_ms);
  EXPECT_EQ(d.record.lease_until_ms, now + kLeaseMs);
}

TEST_F(AuthorityTest, ExpiredLeaseOtherArgsConflicts) {
  const Record r = InFlight("a");
  EXPECT_EQ(Begin(r, Params("b", "h2"), r.lease_until_ms + 1).status,
            BeginStatus::kConflict);
}

TEST_F(AuthorityTest, CompletedIsDuplicateWithStoredOutcome) {
  const Record done = Completed(Outcome::kError, "card declined");
  BeginDecision d = Begin(done, Params("z"), kT0 + 200);
  EXPECT_EQ(d.status, BeginStatus::kDuplicate);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.record.outcome, Outcome::kError);
  EXPECT_EQ(d.record.result, "card declined");
  EXPECT_EQ(d.record.fence, done.fence);
}

TEST_F(AuthorityTest, CompletedOtherArgsConflicts) {
  EXPECT_EQ(Begin(Completed(), Params("z", "h2"), kT0 + 200).status,
            BeginStatus::kConflict);
}

TEST_F(AuthorityTest, RecordNeverExpiresBeforeItsLease) {
  BeginParams p = Params("a");
  p.ttl_s = 1;
  p.lease_ms = 60'000;
  BeginDecision d = Begin(std::nullopt, p, kT0);
  EXPECT_EQ(d.record.expire_at_ms, d.record.lease_until_ms);
}

TEST_F(AuthorityTest, CompleteStoresOutcomeAndKeepsTtlAfterCompletion) {
  const Record r = InFlight();
  CompleteParams c{r.fence, Outcome::kSuccess, "ok", 0};
  FencedDecision d = DecideComplete(r, c, kT0 + 500);
  EXPECT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_EQ(d.record.state, RecordState::kCompleted);
  EXPECT_EQ(d.record.result, "ok");
  EXPECT_EQ(d.record.completed_at_ms, kT0 + 500);
  EXPECT_EQ(d.record.expire_at_ms, kT0 + 500 + kTtlS * 1000);
  EXPECT_LE(d.record.lease_until_ms, d.record.expire_at_ms);

  c.ttl_s = 60;
  EXPECT_EQ(DecideComplete(r, c, kT0 + 500).record.expire_at_ms,
            kT0 + 500 + 60'000);
}

TEST_F(AuthorityTest, CompleteAfterLeaseRanOutSucceedsIfNobodyTookOver) {
  const Record r = InFlight();
  CompleteParams c{r.fence, Outcome::kSuccess, "late", 0};
  EXPECT_EQ(DecideComplete(r, c, r.lease_until_ms + 5000).status,
            FencedStatus::kOk);
}

TEST_F(AuthorityTest, CompleteWithStaleFenceIsRefusedAndWritesNothing) {
  const Record r = InFlight("a");
  BeginDecision takeover = Begin(r, Params("b"), r.lease_until_ms + 1);
  CompleteParams c{r.fence, Outcome::kSuccess, "stale", 0};
  FencedDecision d = DecideComplete(takeover.record, c, r.lease_until_ms + 2);
  EXPECT_EQ(d.status, FencedStatus::kStaleFence);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.record.fence, takeover.record.fence);
}

TEST_F(AuthorityTest, CompleteIsIdempotentForSameOutcome) {
  const Record done = Completed(Outcome::kSuccess, "r");
  CompleteParams same{done.fence, Outcome::kSuccess, "r", 0};
  FencedDecision d = DecideComplete(done, same, kT0 + 300);
  EXPECT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.write, WriteKind::kNone);

  CompleteParams different{done.fence, Outcome::kSuccess, "other", 0};
  d = DecideComplete(done, different, kT0 + 300);
  EXPECT_EQ(d.status, FencedStatus::kAlreadyCompleted);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.record.result, "r");
  CompleteParams other_outcome{done.fence, Outcome::kError, "r", 0};
  EXPECT_EQ(DecideComplete(done, other_outcome, kT0 + 300).status,
            FencedStatus::kAlreadyCompleted);
}

// On a record decoded without its result, the caller says whether the
// results match, and is asked only when the answer depends on it.
TEST_F(AuthorityTest, CompleteWithoutTheStoredResultAsksOnlyWhenItMatters) {
  Record done = Completed(Outcome::kSuccess, "r");
  done.result.clear();
  int asked = 0;
  auto same = [&asked] {
    ++asked;
    return true;
  };
  auto different = [&asked] {
    ++asked;
    return false;
  };
  CompleteParams again{done.fence, Outcome::kSuccess, "r", 0};
  EXPECT_EQ(DecideComplete(done, again, kT0 + 300, same).status,
            FencedStatus::kOk);
  EXPECT_EQ(DecideComplete(done, again, kT0 + 300, different).status,
            FencedStatus::kAlreadyCompleted);
  EXPECT_EQ(asked, 2);
  CompleteParams other_outcome{done.fence, Outcome::kError, "r", 0};
  EXPECT_EQ(DecideComplete(done, other_outcome, kT0 + 300, same).status,
            FencedStatus::kAlreadyCompleted);
  CompleteParams stale{done.fence + 1, Outcome::kSuccess, "r", 0};
  EXPECT_EQ(DecideComplete(done, stale, kT0 + 300, same).status,
            FencedStatus::kStaleFence);
  const Record claimed = InFlight();
  CompleteParams first{claimed.fence, Outcome::kSuccess, "r", 0};
  FencedDecision d = DecideComplete(claimed, first, kT0 + 300, same);
  EXPECT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_EQ(d.record.result, "r");
  EXPECT_EQ(asked, 2);
}

TEST_F(AuthorityTest, FencedCallsOnAbsentOrExpiredRecordAreNotFound) {
  CompleteParams c{7, Outcome::kSuccess, "", 0};
  EXPECT_EQ(DecideComplete(std::nullopt, c, kT0).status,
            FencedStatus::kNotFound);
  EXPECT_EQ(DecideRelease(std::nullopt, 7, kT0).status,
            FencedStatus::kNotFound);
  EXPECT_EQ(DecideRenew(std::nullopt, 7, kLeaseMs, kT0).status,
            FencedStatus::kNotFound);
  const Record r = InFlight();
  c.fence = r.fence;
  EXPECT_EQ(DecideComplete(r, c, r.expire_at_ms).status,
            FencedStatus::kNotFound);
}

TEST_F(AuthorityTest, ReleaseDeletesOnlyTheCurrentInFlightClaim) {
  const Record r = InFlight();
  FencedDecision d = DecideRelease(r, r.fence, kT0 + 1);
  EXPECT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.write, WriteKind::kDelete);

  d = DecideRelease(r, r.fence - 1, kT0 + 1);
  EXPECT_EQ(d.status, FencedStatus::kStaleFence);
  EXPECT_EQ(d.write, WriteKind::kNone);

  const Record done = Completed();
  d = DecideRelease(done, done.fence, kT0 + 200);
  EXPECT_EQ(d.status, FencedStatus::kAlreadyCompleted);
  EXPECT_EQ(d.write, WriteKind::kNone);
}

TEST_F(AuthorityTest, RenewExtendsLeaseAndExpiry) {
  const Record r = InFlight();
  const int64_t now = kT0 + 9'000;
  FencedDecision d = DecideRenew(r, r.fence, 30'000, now);
  EXPECT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_EQ(d.record.lease_until_ms, now + 30'000);
  EXPECT_GE(d.record.expire_at_ms, d.record.lease_until_ms);
  EXPECT_EQ(d.record.fence, r.fence);

  EXPECT_EQ(DecideRenew(r, r.fence + 1, 30'000, now).status,
            FencedStatus::kStaleFence);
  const Record done = Completed();
  EXPECT_EQ(DecideRenew(done, done.fence, 30'000, now).status,
            FencedStatus::kAlreadyCompleted);
}

TEST_F(AuthorityTest, RenewOfLapsedLeaseSucceedsIfNobodyTookOver) {
  const Record r = InFlight();
  EXPECT_EQ(DecideRenew(r, r.fence, kLeaseMs, r.lease_until_ms + 1).status,
            FencedStatus::kOk);
}

TEST_F(AuthorityTest, LiveRecordHidesExpired) {
  const Record r = InFlight();
  EXPECT_TRUE(LiveRecord(r, r.expire_at_ms - 1).has_value());
  EXPECT_FALSE(LiveRecord(r, r.expire_at_ms).has_value());
  EXPECT_FALSE(LiveRecord(std::nullopt, kT0).has_value());
}

}  // namespace
}  // namespace dedup
