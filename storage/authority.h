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
};

enum class BeginStatus { kStarted, kInUse, kConflict, kDuplicate };

struct BeginDecision {
  BeginStatus status = BeginStatus::kInUse;
  bool takeover = false;  // STARTED over an expired lease
  bool reentry = false;   // STARTED again for the same owner, same fence
  WriteKind write = WriteKind::kNone;
  // The record after the decision: the one written, or the one found. For
  // CONFLICT on an absent record this is never the case (absent is STARTED).
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
};

[[nodiscard]] FencedDecision DecideComplete(const std::optional<Record>& stored,
                                            const CompleteParams& params,
                                            int64_t now_ms);

[[nodiscard]] FencedDecision DecideRelease(const std::optional<Record>& stored,
                                           uint64_t fence, int64_t now_ms);

[[nodiscard]] FencedDecision DecideRenew(const std::optional<Record>& stored,
                                         uint64_t fence, int64_t lease_ms,
                                         int64_t now_ms);

// The record as readers see it: nullopt when absent or expired.
[[nodiscard]] std::optional<Record> LiveRecord(
    const std::optional<Record>& stored, int64_t now_ms);

}  // namespace dedup

#endif  // DEDUP_STORAGE_AUTHORITY_H_
