// A reference model of the API contract for fuzz_authority_model: per key at
// most one record, and the Begin table and fenced-call rules of DESIGN.md
// "The API contract" applied directly. Written from the contract and the
// comments of storage/authority.h, not from authority.cc; where the contract
// leaves a detail open the model follows what authority.h and the unit tests
// pin down (marked "documented choice").
#ifndef DEDUP_TESTS_FUZZ_AUTHORITY_MODEL_H_
#define DEDUP_TESTS_FUZZ_AUTHORITY_MODEL_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "storage/authority.h"
#include "storage/record.h"

namespace dedup::fuzz {

struct ModelRecord {
  bool completed = false;
  std::string args_hash;
  std::string owner;
  Outcome outcome = Outcome::kNone;
  std::string result;
  uint64_t fence = 0;
  int64_t created_at = 0;
  int64_t completed_at = 0;
  int64_t lease_until = 0;
  int64_t expire_at = 0;
  uint32_t ttl_s = 0;
  uint32_t attempts = 0;
};

struct ModelBegin {
  BeginStatus status = BeginStatus::kInUse;
  bool takeover = false;
  bool reentry = false;
  bool writes = false;
  bool new_fence = false;
  int64_t retry_after_ms = 0;
  ModelRecord record;  // written or found
};

struct ModelFenced {
  FencedStatus status = FencedStatus::kNotFound;
  WriteKind write = WriteKind::kNone;
  ModelRecord record;  // meaningful unless NOT_FOUND or a done Release
};

class Model {
 public:
  static constexpr int kKeys = 3;

  // "A record expires ttl after its last write ... and never before its
  // lease ends."
  static int64_t ExpiryOf(int64_t write_ms, uint32_t ttl_s,
                          int64_t lease_until) {
    return std::max(write_ms + int64_t{ttl_s} * 1000, lease_until);
  }

  const std::optional<ModelRecord>& At(int key) const { return rec_[key]; }

  // Live: present and now < expire_at ("absent once now >= expire_at").
  std::optional<ModelRecord> Live(int key, int64_t now) const {
    if (rec_[key].has_value() && now < rec_[key]->expire_at) return rec_[key];
    return std::nullopt;
  }

  ModelBegin Begin(int key, const std::string& args_hash,
                   const std::string& owner, int64_t lease_ms, uint32_t ttl_s,
                   int64_t now, uint64_t next_fence) {
    ModelBegin b;
    std::optional<ModelRecord> live = Live(key, now);
    // Row "none, or expired": STARTED with a new fence, whatever the hash.
    if (!live.has_value()) {
      ModelRecord r;
      r.args_hash = args_hash;
      r.owner = owner;
      r.fence = next_fence;
      r.created_at = now;
      r.lease_until = now + lease_ms;
      r.expire_at = ExpiryOf(now, ttl_s, r.lease_until);
      r.ttl_s = ttl_s;
      r.attempts = 1;
      b.status = BeginStatus::kStarted;
      b.writes = b.new_fence = true;
      rec_[key] = b.record = r;
      return b;
    }
    b.record = *live;
    // Any live record with another hash: CONFLICT.
    if (live->args_hash != args_hash) {
      b.status = BeginStatus::kConflict;
      return b;
    }
    if (live->completed) {
      b.status = BeginStatus::kDuplicate;
      return b;
    }
    if (now < live->lease_until) {
      // Same (non-anonymous) owner: re-entry, same fence, nothing written
      // (documented choice: the lease is not extended).
      if (!owner.empty() && owner == live->owner) {
        b.status = BeginStatus::kStarted;
        b.reentry = true;
        return b;
      }
      b.status = BeginStatus::kInUse;
      b.retry_after_ms = std::min<int64_t>(
          std::max<int64_t>(live->lease_until - now, 1), kMaxRetryAfterMs);
      return b;
    }
    // Lease ran out: takeover with a new fence. Documented choice: the
    // record keeps created_at, and attempts counts 1 + takeovers.
    ModelRecord r = *live;
    r.owner = owner;
    r.fence = next_fence;
    r.lease_until = now + lease_ms;
    r.expire_at = ExpiryOf(now, ttl_s, r.lease_until);
    r.ttl_s = ttl_s;
    r.attempts += 1;
    b.status = BeginStatus::kStarted;
    b.takeover = true;
    b.writes = b.new_fence = true;
    rec_[key] = b.record = r;
    return b;
  }

  ModelFenced Complete(int key, uint64_t fence, Outcome outcome,
                       const std::string& result, uint32_t ttl_s, int64_t now) {
    ModelFenced f;
    if (!Fenced(key, fence, now, &f)) {
      // "A repeated Complete with the same fence and the same result is
      // answered as success."
      if (f.status == FencedStatus::kAlreadyCompleted &&
          f.record.outcome == outcome && f.record.result == result) {
        f.status = FencedStatus::kOk;
      }
      return f;
    }
    ModelRecord& r = *rec_[key];
    r.completed = true;
    r.outcome = outcome;
    r.result = result;
    r.completed_at = now;
    if (ttl_s != 0) r.ttl_s = ttl_s;
    // Documented choice: the lease ends at completion, so the completed
    // record is kept exactly ttl after Complete.
    r.lease_until = now;
    r.expire_at = ExpiryOf(now, r.ttl_s, now);
    f.status = FencedStatus::kOk;
    f.write = WriteKind::kPut;
    f.record = r;
    return f;
  }

  ModelFenced Release(int key, uint64_t fence, int64_t now) {
    ModelFenced f;
    if (!Fenced(key, fence, now, &f)) return f;
    rec_[key].reset();
    f.status = FencedStatus::kOk;
    f.write = WriteKind::kDelete;
    return f;
  }

  ModelFenced Renew(int key, uint64_t fence, int64_t lease_ms, int64_t now) {
    ModelFenced f;
    if (!Fenced(key, fence, now, &f)) return f;
    ModelRecord& r = *rec_[key];
    r.lease_until = now + lease_ms;
    // Documented choice: a Renew never brings expiry forward.
    r.expire_at = std::max(r.expire_at, ExpiryOf(now, r.ttl_s, r.lease_until));
    f.status = FencedStatus::kOk;
    f.write = WriteKind::kPut;
    f.record = r;
    return f;
  }

  void Forget(int key) { rec_[key].reset(); }

 private:
  // The rules shared by Complete, Release and Renew: the live record's
  // current fence decides, not the clock. False with the refusal in *f.
  bool Fenced(int key, uint64_t fence, int64_t now, ModelFenced* f) const {
    std::optional<ModelRecord> live = Live(key, now);
    if (!live.has_value()) {
      f->status = FencedStatus::kNotFound;
      return false;
    }
    f->record = *live;
    if (live->fence != fence) {
      f->status = FencedStatus::kStaleFence;
      return false;
    }
    if (live->completed) {
      f->status = FencedStatus::kAlreadyCompleted;
      return false;
    }
    return true;
  }

  std::array<std::optional<ModelRecord>, kKeys> rec_;
};

}  // namespace dedup::fuzz

#endif  // DEDUP_TESTS_FUZZ_AUTHORITY_MODEL_H_
