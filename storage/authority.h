// The authority's state machine: a pure function of (stored record, request,
// now) to (answer, record to write). It knows nothing of RocksDB or gRPC, so
// every rule of the API contract is unit-testable with plain values.
//
// Callers pass the record as stored (possibly expired); expiry is decided
// here so that every read path enforces it the same way. Durations are in
// milliseconds, timestamps in Unix milliseconds.
#ifndef DEDUP_STORAGE_AUTHORITY_H_
#define DEDUP_STORAGE_AUTHORITY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "storage/record.h"

namespace dedup {

// What a decision asks the store to do with the key.
enum class WriteKind { kNone, kPut, kDelete };

struct BeginParams {
  std::string args_hash;
  std::string owner;  // empty: anonymous, never re-entrant
  int64_t lease_ms = 0;
  uint32_t ttl_s = 0;
  // On a tombstone (an expired completed record still retained): false
  // answers kExpired, true starts the operation afresh (a higher fence).
  bool accept_rerun = false;
  // An ERROR outcome allows a fresh attempt (per-namespace policy
  // "on_error": "retry") instead of being replayed as DUPLICATE.
  bool retry_errors = false;
};

// kExpired: the record expired after completing; its tombstone says when
// and how the operation ran (no result). Nothing is written.
enum class BeginStatus { kStarted, kInUse, kConflict, kDuplicate, kExpired };

struct BeginDecision {
  BeginStatus status = BeginStatus::kInUse;
  bool takeover = false;  // STARTED over an expired lease
  bool reentry = false;   // STARTED again for the same owner, same fence
  // STARTED over a tombstone (accept_rerun) or over an ERROR outcome
  // (retry_errors).
  bool rerun = false;
  WriteKind write = WriteKind::kNone;
  // The record after the decision: the one written, or the one found (for
  // kExpired and a CONFLICT on a tombstone: the tombstone, TombstoneOf).
  // A STARTED takeover or re-entry keeps the record's checkpoint, if any.
  Record record;
  int64_t retry_after_ms = 0;  // IN_USE only
};

// Longest retry_after_ms suggested for IN_USE: callers should not go quiet
// for a whole long lease when the owner may finish early.
inline constexpr int64_t kMaxRetryAfterMs = 1000;

// `next_fence` is called only when a new fence is issued (fresh start or
// takeover) and must return a value above every fence issued before.
[[nodiscard]] BeginDecision DecideBegin(
    const std::optional<Record>& stored, const BeginParams& params,
    int64_t now_ms, absl::FunctionRef<uint64_t()> next_fence);

// Shared answer of the fenced calls (Complete, Release, Renew).
enum class FencedStatus { kOk, kStaleFence, kNotFound, kAlreadyCompleted };

struct FencedDecision {
  FencedStatus status = FencedStatus::kNotFound;
  WriteKind write = WriteKind::kNone;
  // The record after the decision; meaningless for kNotFound and for a
  // successful Release (the record is deleted).
  Record record;
};

struct CompleteParams {
  uint64_t fence = 0;
  Outcome outcome = Outcome::kSuccess;  // kSuccess or kError
  std::string result;
  uint32_t ttl_s = 0;  // 0: keep the TTL given at Begin
  // How long the record's tombstone is kept after it expires; 0: none.
  int64_t retention_ms = 0;
};

[[nodiscard]] FencedDecision DecideComplete(const std::optional<Record>& stored,
                                            const CompleteParams& params,
                                            int64_t now_ms);

// DecideComplete on a record decoded without its result (RecordView,
// `stored->result` is not read): `same_result()` says whether the stored
// result equals `params.result`, and is called only when the decision
// depends on it. The decision's record then carries no result unless this
// Complete writes one.
[[nodiscard]] FencedDecision DecideComplete(
    const std::optional<Record>& stored, const CompleteParams& params,
    int64_t now_ms, absl::FunctionRef<bool()> same_result);

[[nodiscard]] FencedDecision DecideRelease(const std::optional<Record>& stored,
                                           uint64_t fence, int64_t now_ms);

[[nodiscard]] FencedDecision DecideRenew(const std::optional<Record>& stored,
                                         uint64_t fence, int64_t lease_ms,
                                         int64_t now_ms);

struct CheckpointParams {
  uint64_t fence = 0;
  std::string step;
  std::string data;
  // > 0: also renews the lease to now + lease_ms, as Renew would.
  int64_t lease_ms = 0;
};

// Records the owner's progress on its in-flight record (replacing the last
// checkpoint). Refused like Renew: stale fence, absent, completed.
[[nodiscard]] FencedDecision DecideCheckpoint(
    const std::optional<Record>& stored, const CheckpointParams& params,
    int64_t now_ms);

// The record as readers see it: nullopt when absent or expired.
[[nodiscard]] std::optional<Record> LiveRecord(
    const std::optional<Record>& stored, int64_t now_ms);

}  // namespace dedup

#endif  // DEDUP_STORAGE_AUTHORITY_H_
