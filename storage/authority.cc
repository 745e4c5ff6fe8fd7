#include "storage/authority.h"

#include <algorithm>

namespace dedup {
namespace {

constexpr int64_t kMillisPerSecond = 1000;

// A record is kept `ttl` after its last write and never expires before its
// lease ends, so an owner that Completes late still finds its claim.
int64_t ExpiryAfterWrite(int64_t now_ms, uint32_t ttl_s,
                         int64_t lease_until_ms) {
  return std::max(now_ms + int64_t{ttl_s} * kMillisPerSecond, lease_until_ms);
}

// Starts a new execution on `record`, bumping the fence.
void Claim(Record& record, const BeginParams& params, int64_t now_ms,
           uint64_t fence) {
  record.state = RecordState::kInFlight;
  record.outcome = Outcome::kNone;
  record.fence = fence;
  record.owner = params.owner;
  record.args_hash = params.args_hash;
  record.result.clear();
  record.completed_at_ms = 0;
  record.retain_until_ms = 0;
  record.ttl_s = params.ttl_s;
  record.lease_until_ms = now_ms + params.lease_ms;
  record.expire_at_ms =
      ExpiryAfterWrite(now_ms, params.ttl_s, record.lease_until_ms);
  record.attempts += 1;
}

}  // namespace

std::optional<Record> LiveRecord(const std::optional<Record>& stored,
                                 int64_t now_ms) {
  if (stored.has_value() && stored->IsLiveAt(now_ms)) return stored;
  return std::nullopt;
}

BeginDecision DecideBegin(const std::optional<Record>& stored,
                          const BeginParams& params, int64_t now_ms,
                          absl::FunctionRef<uint64_t()> next_fence) {
  BeginDecision d;
  std::optional<Record> live = LiveRecord(stored, now_ms);
  if (!live.has_value()) {
    if (stored.has_value() && stored->IsTombstoneAt(now_ms)) {
      d.record = TombstoneOf(*stored);
      if (d.record.args_hash != params.args_hash) {
        d.status = BeginStatus::kConflict;
        return d;
      }
      if (!params.accept_rerun &&
          !(params.retry_errors && d.record.outcome == Outcome::kError)) {
        d.status = BeginStatus::kExpired;
        return d;
      }
      // A new execution of the same logical operation: attempts go on.
      d.status = BeginStatus::kStarted;
      d.rerun = true;
      d.write = WriteKind::kPut;
      d.record.created_at_ms = now_ms;
      Claim(d.record, params, now_ms, next_fence());
      return d;
    }
    d.status = BeginStatus::kStarted;
    d.write = WriteKind::kPut;
    d.record.created_at_ms = now_ms;
    Claim(d.record, params, now_ms, next_fence());
    return d;
  }
  d.record = *std::move(live);
  if (d.record.args_hash != params.args_hash) {
    d.status = BeginStatus::kConflict;
    return d;
  }
  if (d.record.state == RecordState::kCompleted) {
    if (params.retry_errors && d.record.outcome == Outcome::kError) {
      // A failed attempt under a policy that allows another: a new
      // execution of the same operation, attempts going on.
      d.status = BeginStatus::kStarted;
      d.rerun = true;
      d.write = WriteKind::kPut;
      d.record = TombstoneOf(d.record);
      d.record.created_at_ms = now_ms;
      Claim(d.record, params, now_ms, next_fence());
      return d;
    }
    d.status = BeginStatus::kDuplicate;
    return d;
  }
  if (now_ms < d.record.lease_until_ms) {
    if (!params.owner.empty() && params.owner == d.record.owner) {
      d.status = BeginStatus::kStarted;
      d.reentry = true;
      return d;
    }
    d.status = BeginStatus::kInUse;
    d.retry_after_ms = std::clamp<int64_t>(d.record.lease_until_ms - now_ms, 1,
                                           kMaxRetryAfterMs);
    return d;
  }
  d.status = BeginStatus::kStarted;
  d.takeover = true;
  d.write = WriteKind::kPut;
  Claim(d.record, params, now_ms, next_fence());
  return d;
}

namespace {

// Common preamble of the fenced calls: nullopt when the call may proceed on
// an in-flight record it owns; otherwise the refusal.
std::optional<FencedDecision> CheckFence(const std::optional<Record>& live,
                                         uint64_t fence) {
  FencedDecision d;
  if (!live.has_value()) {
    d.status = FencedStatus::kNotFound;
    return d;
  }
  d.record = *live;
  if (live->fence != fence) {
    d.status = FencedStatus::kStaleFence;
    return d;
  }
  if (live->state == RecordState::kCompleted) {
    d.status = FencedStatus::kAlreadyCompleted;
    return d;
  }
  return std::nullopt;
}

}  // namespace

FencedDecision DecideComplete(const std::optional<Record>& stored,
                              const CompleteParams& params, int64_t now_ms) {
  return DecideComplete(stored, params, now_ms, [&] {
    return stored.has_value() && stored->result == params.result;
  });
}

FencedDecision DecideComplete(const std::optional<Record>& stored,
                              const CompleteParams& params, int64_t now_ms,
                              absl::FunctionRef<bool()> same_result) {
  std::optional<Record> live = LiveRecord(stored, now_ms);
  if (std::optional<FencedDecision> refusal = CheckFence(live, params.fence)) {
    // Complete is itself idempotent: the same outcome again is success.
    if (refusal->status == FencedStatus::kAlreadyCompleted &&
        refusal->record.outcome == params.outcome && same_result()) {
      refusal->status = FencedStatus::kOk;
    }
    return *std::move(refusal);
  }
  FencedDecision d;
  d.status = FencedStatus::kOk;
  d.write = WriteKind::kPut;
  d.record = *std::move(live);
  d.record.state = RecordState::kCompleted;
  d.record.outcome = params.outcome;
  d.record.result = params.result;
  d.record.completed_at_ms = now_ms;
  if (params.ttl_s != 0) d.record.ttl_s = params.ttl_s;
  d.record.lease_until_ms = now_ms;
  d.record.expire_at_ms = ExpiryAfterWrite(now_ms, d.record.ttl_s, now_ms);
  d.record.retain_until_ms =
      params.retention_ms > 0 ? d.record.expire_at_ms + params.retention_ms : 0;
  // The result supersedes the progress it was made from.
  d.record.checkpoint_step.clear();
  d.record.checkpoint_data.clear();
  d.record.checkpoint_fence = 0;
  d.record.checkpoint_at_ms = 0;
  return d;
}

FencedDecision DecideRelease(const std::optional<Record>& stored,
                             uint64_t fence, int64_t now_ms) {
  std::optional<Record> live = LiveRecord(stored, now_ms);
  if (std::optional<FencedDecision> refusal = CheckFence(live, fence)) {
    return *std::move(refusal);
  }
  FencedDecision d;
  d.status = FencedStatus::kOk;
  d.write = WriteKind::kDelete;
  d.record = *std::move(live);
  return d;
}

namespace {

void ExtendLease(Record& record, int64_t lease_ms, int64_t now_ms) {
  record.lease_until_ms = now_ms + lease_ms;
  record.expire_at_ms =
      std::max(record.expire_at_ms,
               ExpiryAfterWrite(now_ms, record.ttl_s, record.lease_until_ms));
}

}  // namespace

FencedDecision DecideRenew(const std::optional<Record>& stored, uint64_t fence,
                           int64_t lease_ms, int64_t now_ms) {
  std::optional<Record> live = LiveRecord(stored, now_ms);
  if (std::optional<FencedDecision> refusal = CheckFence(live, fence)) {
    return *std::move(refusal);
  }
  FencedDecision d;
  d.status = FencedStatus::kOk;
  d.write = WriteKind::kPut;
  d.record = *std::move(live);
  ExtendLease(d.record, lease_ms, now_ms);
  return d;
}

FencedDecision DecideCheckpoint(const std::optional<Record>& stored,
                                const CheckpointParams& params,
                                int64_t now_ms) {
  std::optional<Record> live = LiveRecord(stored, now_ms);
  if (std::optional<FencedDecision> refusal = CheckFence(live, params.fence)) {
    return *std::move(refusal);
  }
  FencedDecision d;
  d.status = FencedStatus::kOk;
  d.write = WriteKind::kPut;
  d.record = *std::move(live);
  d.record.checkpoint_step = params.step;
  d.record.checkpoint_data = params.data;
  d.record.checkpoint_fence = params.fence;
  d.record.checkpoint_at_ms = now_ms;
  if (params.lease_ms > 0) ExtendLease(d.record, params.lease_ms, now_ms);
  return d;
}

}  // namespace dedup
