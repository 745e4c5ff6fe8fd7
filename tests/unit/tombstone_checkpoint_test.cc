// Tombstones (EXPIRED instead of a silent re-run) and checkpoints (progress
// carried over to a takeover): the state machine's rules, the record
// codec's version 2 and the compaction filter's handling of tombstones.
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "storage/authority.h"
#include "storage/record.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"

namespace dedup {
namespace tombstone_checkpoint_test {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kLeaseMs = 10'000;
constexpr uint32_t kTtlS = 3600;
constexpr int64_t kRetentionMs = 7 * 24 * 3600 * 1000LL;
constexpr int64_t kGraceMs = 60'000;

class TombstoneCheckpointTest : public ::testing::Test {
 protected:
  BeginParams Params(const std::string& owner, const std::string& hash = "h1",
                     bool accept_rerun = false) {
    BeginParams p;
    p.args_hash = hash;
    p.owner = owner;
    p.lease_ms = kLeaseMs;
    p.ttl_s = kTtlS;
    p.accept_rerun = accept_rerun;
    return p;
  }
  BeginDecision Begin(const std::optional<Record>& stored,
                      const BeginParams& params, int64_t now) {
    return DecideBegin(stored, params, now, [this] { return ++last_fence_; });
  }
  Record InFlight(const std::string& owner = "a") {
    BeginDecision d = Begin(std::nullopt, Params(owner), kT0);
    EXPECT_EQ(d.status, BeginStatus::kStarted);
    return d.record;
  }
  Record Completed(int64_t retention_ms, Outcome outcome = Outcome::kSuccess) {
    Record r = InFlight();
    CompleteParams c;
    c.fence = r.fence;
    c.outcome = outcome;
    c.result = "the result";
    c.retention_ms = retention_ms;
    FencedDecision d = DecideComplete(r, c, kT0 + 100);
    EXPECT_EQ(d.status, FencedStatus::kOk);
    return d.record;
  }
  CheckpointParams Progress(uint64_t fence, const std::string& step,
                            int64_t lease_ms = 0) {
    CheckpointParams p;
    p.fence = fence;
    p.step = step;
    p.data = "data of " + step;
    p.lease_ms = lease_ms;
    return p;
  }
  uint64_t last_fence_ = 41;
};

TEST_F(TombstoneCheckpointTest, CompleteSetsTheRetentionAfterExpiry) {
  const Record done = Completed(kRetentionMs);
  EXPECT_EQ(done.retain_until_ms, done.expire_at_ms + kRetentionMs);
  EXPECT_EQ(Completed(0).retain_until_ms, 0);
}

TEST_F(TombstoneCheckpointTest, ALateRetryGetsExpiredWithTheTombstone) {
  const Record done = Completed(kRetentionMs, Outcome::kError);
  const int64_t late = done.expire_at_ms + 5;
  BeginDecision d = Begin(done, Params("b"), late);
  EXPECT_EQ(d.status, BeginStatus::kExpired);
  EXPECT_EQ(d.write, WriteKind::kNone);
  EXPECT_EQ(d.record.fence, done.fence);
  EXPECT_EQ(d.record.outcome, Outcome::kError);
  EXPECT_EQ(d.record.completed_at_ms, done.completed_at_ms);
  EXPECT_EQ(d.record.args_hash, "h1");
  EXPECT_TRUE(d.record.result.empty());
  EXPECT_TRUE(d.record.owner.empty());
  // Live until expiry: a duplicate with its result.
  BeginDecision dup = Begin(done, Params("b"), done.expire_at_ms - 1);
  EXPECT_EQ(dup.status, BeginStatus::kDuplicate);
  EXPECT_EQ(dup.record.result, "the result");
}

TEST_F(TombstoneCheckpointTest, AcceptedRerunStartsWithAHigherFence) {
  const Record done = Completed(kRetentionMs);
  const int64_t late = done.expire_at_ms + 5;
  BeginDecision d = Begin(done, Params("b", "h1", /*accept_rerun=*/true), late);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_TRUE(d.rerun);
  EXPECT_FALSE(d.takeover);
  EXPECT_EQ(d.write, WriteKind::kPut);
  EXPECT_GT(d.record.fence, done.fence);
  EXPECT_EQ(d.record.attempts, done.attempts + 1);
  EXPECT_EQ(d.record.state, RecordState::kInFlight);
  EXPECT_EQ(d.record.retain_until_ms, 0);
  EXPECT_EQ(d.record.created_at_ms, late);
  EXPECT_EQ(d.record.owner, "b");
}

TEST_F(TombstoneCheckpointTest, OtherArgumentsOnATombstoneConflict) {
  const Record done = Completed(kRetentionMs);
  for (bool rerun : {false, true}) {
    BeginDecision d =
        Begin(done, Params("b", "other", rerun), done.expire_at_ms + 5);
    EXPECT_EQ(d.status, BeginStatus::kConflict) << rerun;
    EXPECT_EQ(d.write, WriteKind::kNone);
    EXPECT_TRUE(d.record.result.empty());
  }
}

TEST_F(TombstoneCheckpointTest, AfterTheRetentionTheKeyStartsFresh) {
  const Record done = Completed(kRetentionMs);
  BeginDecision d = Begin(done, Params("b"), done.retain_until_ms);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_FALSE(d.rerun);
  EXPECT_EQ(d.record.attempts, 1u);
  // Without retention expiry is what it always was.
  const Record plain = Completed(0);
  EXPECT_EQ(Begin(plain, Params("b"), plain.expire_at_ms).status,
            BeginStatus::kStarted);
}

TEST_F(TombstoneCheckpointTest, FencedCallsOnATombstoneFindNothing) {
  const Record done = Completed(kRetentionMs);
  const int64_t late = done.expire_at_ms + 5;
  EXPECT_EQ(DecideRenew(done, done.fence, kLeaseMs, late).status,
            FencedStatus::kNotFound);
  EXPECT_EQ(DecideRelease(done, done.fence, late).status,
            FencedStatus::kNotFound);
  EXPECT_EQ(DecideCheckpoint(done, Progress(done.fence, "s"), late).status,
            FencedStatus::kNotFound);
  EXPECT_FALSE(LiveRecord(done, late).has_value());
}

TEST_F(TombstoneCheckpointTest, CheckpointIsKeptAndCarriedToATakeover) {
  const Record r = InFlight("a");
  FencedDecision c = DecideCheckpoint(r, Progress(r.fence, "charged"), kT0 + 5);
  ASSERT_EQ(c.status, FencedStatus::kOk);
  EXPECT_EQ(c.write, WriteKind::kPut);
  EXPECT_EQ(c.record.checkpoint_step, "charged");
  EXPECT_EQ(c.record.checkpoint_data, "data of charged");
  EXPECT_EQ(c.record.checkpoint_fence, r.fence);
  EXPECT_EQ(c.record.checkpoint_at_ms, kT0 + 5);
  // The lease is untouched without lease_ms.
  EXPECT_EQ(c.record.lease_until_ms, r.lease_until_ms);

  // The same owner re-entering sees it; a takeover receives it.
  BeginDecision again = Begin(c.record, Params("a"), kT0 + 6);
  EXPECT_TRUE(again.reentry);
  EXPECT_EQ(again.record.checkpoint_step, "charged");
  BeginDecision takeover =
      Begin(c.record, Params("b"), c.record.lease_until_ms);
  ASSERT_EQ(takeover.status, BeginStatus::kStarted);
  EXPECT_TRUE(takeover.takeover);
  EXPECT_GT(takeover.record.fence, r.fence);
  EXPECT_EQ(takeover.record.checkpoint_step, "charged");
  EXPECT_EQ(takeover.record.checkpoint_fence, r.fence);
}

TEST_F(TombstoneCheckpointTest, CheckpointIsRefusedLikeRenew) {
  const Record r = InFlight("a");
  EXPECT_EQ(DecideCheckpoint(r, Progress(r.fence + 1, "s"), kT0 + 5).status,
            FencedStatus::kStaleFence);
  EXPECT_EQ(DecideCheckpoint(std::nullopt, Progress(1, "s"), kT0).status,
            FencedStatus::kNotFound);
  const Record done = Completed(0);
  FencedDecision d =
      DecideCheckpoint(done, Progress(done.fence, "s"), kT0 + 200);
  EXPECT_EQ(d.status, FencedStatus::kAlreadyCompleted);
  EXPECT_EQ(d.write, WriteKind::kNone);
}

TEST_F(TombstoneCheckpointTest, CheckpointWithLeaseRenewsIt) {
  const Record r = InFlight("a");
  FencedDecision d = DecideCheckpoint(
      r, Progress(r.fence, "s", /*lease_ms=*/50'000), kT0 + 1000);
  ASSERT_EQ(d.status, FencedStatus::kOk);
  EXPECT_EQ(d.record.lease_until_ms, kT0 + 1000 + 50'000);
}

TEST_F(TombstoneCheckpointTest, CompleteDropsTheCheckpoint) {
  const Record r = InFlight("a");
  FencedDecision c = DecideCheckpoint(r, Progress(r.fence, "s"), kT0 + 5);
  CompleteParams p;
  p.fence = r.fence;
  p.outcome = Outcome::kSuccess;
  p.result = "ok";
  FencedDecision done = DecideComplete(c.record, p, kT0 + 10);
  ASSERT_EQ(done.status, FencedStatus::kOk);
  EXPECT_FALSE(done.record.has_checkpoint());
  EXPECT_TRUE(done.record.checkpoint_data.empty());
}

TEST_F(TombstoneCheckpointTest, RetryErrorsStartsAgainAfterAnErrorOnly) {
  BeginParams retry = Params("b");
  retry.retry_errors = true;
  const Record failed = Completed(kRetentionMs, Outcome::kError);
  BeginDecision d = Begin(failed, retry, kT0 + 200);
  EXPECT_EQ(d.status, BeginStatus::kStarted);
  EXPECT_TRUE(d.rerun);
  EXPECT_GT(d.record.fence, failed.fence);
  EXPECT_EQ(d.record.attempts, failed.attempts + 1);
  EXPECT_TRUE(d.record.result.empty());
  EXPECT_EQ(d.record.retain_until_ms, 0);
  // Its tombstone too.
  EXPECT_EQ(Begin(failed, retry, failed.expire_at_ms + 1).status,
            BeginStatus::kStarted);
  // A success is a duplicate whatever the rule; without it, so is an error.
  const Record done = Completed(kRetentionMs, Outcome::kSuccess);
  EXPECT_EQ(Begin(done, retry, kT0 + 200).status, BeginStatus::kDuplicate);
  EXPECT_EQ(Begin(failed, Params("b"), kT0 + 200).status,
            BeginStatus::kDuplicate);
  // Other arguments still conflict.
  BeginParams other = retry;
  other.args_hash = "other";
  EXPECT_EQ(Begin(failed, other, kT0 + 200).status, BeginStatus::kConflict);
}

TEST(RecordVersion2Test, RoundTripsTombstoneAndCheckpointFields) {
  Record r;
  r.state = RecordState::kInFlight;
  r.fence = 9;
  r.expire_at_ms = 1000;
  r.args_hash = "hash";
  r.owner = "owner";
  r.result = std::string("res\0ult", 7);
  r.retain_until_ms = 5000;
  r.checkpoint_step = "step-2";
  r.checkpoint_data = std::string(70'000, 'd');  // > 64 KiB: u32 length
  r.checkpoint_fence = 8;
  r.checkpoint_at_ms = 900;
  const std::string encoded = EncodeRecord(r);
  EXPECT_EQ(static_cast<uint8_t>(encoded[0]), kRecordFormatVersion2);
  absl::StatusOr<Record> decoded = DecodeRecord(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(*decoded == r);
  EXPECT_EQ(PeekExpireAt(encoded), 1000);
  EXPECT_EQ(PeekDropAt(encoded), 5000);
  // Cut anywhere inside the checkpoint: refused, never misread.
  for (size_t cut :
       {size_t{60}, kRecordHeaderSizeV2 + 3, kRecordHeaderSizeV2 + 4 + 5 + 3,
        encoded.size() - 8 - r.result.size()}) {
    EXPECT_EQ(DecodeRecord(encoded.substr(0, cut)).status().code(),
              absl::StatusCode::kDataLoss)
        << cut;
  }
}

TEST(RecordVersion2Test, RecordsWithoutVersion2FieldsKeepVersion1) {
  Record r;
  r.fence = 3;
  r.expire_at_ms = 77;
  r.result = "x";
  const std::string encoded = EncodeRecord(r);
  EXPECT_EQ(static_cast<uint8_t>(encoded[0]), kRecordFormatVersion);
  EXPECT_EQ(encoded.size(), kRecordHeaderSize + 1);
  EXPECT_EQ(PeekDropAt(encoded), 77);
}

TEST(TombstoneFilterTest, ShrinksAfterExpiryAndDropsAfterRetention) {
  const std::string key = EncodeStorageKey("ns", "k");
  Record r;
  r.state = RecordState::kCompleted;
  r.outcome = Outcome::kSuccess;
  r.fence = 4;
  r.expire_at_ms = 10'000;
  r.retain_until_ms = 1'000'000;
  r.args_hash = "h";
  r.owner = "o";
  r.result = std::string(1000, 'r');
  const std::string value = EncodeRecord(r);

  // Live: kept whole.
  EXPECT_FALSE(ShouldDropExpired(key, value, 10'000, kGraceMs));
  EXPECT_FALSE(ShrinkToTombstone(key, value, 10'000 + kGraceMs - 1, kGraceMs)
                   .has_value());
  // Expired past the grace: shrunk to its tombstone, kept.
  std::optional<std::string> small =
      ShrinkToTombstone(key, value, 10'000 + kGraceMs, kGraceMs);
  ASSERT_TRUE(small.has_value());
  EXPECT_LT(small->size(), 100u);
  absl::StatusOr<Record> t = DecodeRecord(*small);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(*t == TombstoneOf(r));
  EXPECT_FALSE(ShouldDropExpired(key, value, 10'000 + kGraceMs, kGraceMs));
  // A tombstone is not shrunk again.
  EXPECT_FALSE(
      ShrinkToTombstone(key, *small, 10'000 + kGraceMs, kGraceMs).has_value());
  // Dropped once the retention (plus grace) has passed.
  EXPECT_FALSE(
      ShouldDropExpired(key, *small, 1'000'000 + kGraceMs - 1, kGraceMs));
  EXPECT_TRUE(ShouldDropExpired(key, *small, 1'000'000 + kGraceMs, kGraceMs));
  EXPECT_TRUE(ShouldDropExpired(key, value, 1'000'000 + kGraceMs, kGraceMs));
}

TEST(TombstoneFilterTest, InFlightAndUnretainedRecordsAreNeverShrunk) {
  const std::string key = EncodeStorageKey("ns", "k");
  Record r;
  r.state = RecordState::kInFlight;
  r.fence = 1;
  r.expire_at_ms = 10;
  r.owner = "o";
  r.checkpoint_fence = 1;
  r.checkpoint_step = "s";
  EXPECT_FALSE(
      ShrinkToTombstone(key, EncodeRecord(r), 1'000'000, kGraceMs).has_value());
  r.state = RecordState::kCompleted;
  r.result = "r";
  EXPECT_FALSE(
      ShrinkToTombstone(key, EncodeRecord(r), 1'000'000, kGraceMs).has_value());
}

}  // namespace
}  // namespace tombstone_checkpoint_test
}  // namespace dedup
