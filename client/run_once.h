// RunOnce: run a side effect at most once per (namespace, key), using the
// authority to claim it, record its outcome and replay that outcome to
// duplicates.
//
// Thread-safe: any number of threads (or processes) may call RunOnce for the
// same key at once; one runs `fn`, the others wait and get its recorded
// outcome (a second run happens only if the first outlives its lease and is
// taken over; Claim::takeover tells the new runner). Blocks the calling thread.
// While `fn` runs, its lease is renewed in the background (every third of
// the lease), so a slow side effect is not taken over; if a renewal learns
// the claim was lost anyway, Claim::lost() turns true. `fn` must not throw
// (if it does, the claim is left to lapse when its lease ends).
//
// Results: store JSON (ExecResult::SuccessJson, PermanentErrorJson), the
// convention every dedup helper shares (client/json_result.h): the
// TypeScript and Python helpers then replay what C++ recorded, and
// RunResult::ResultJson / ResultError read what they recorded. Raw bytes
// (ExecResult::Success, PermanentError) are the escape hatch for results
// only C++ reads: the other helpers refuse a SUCCESS that is not JSON and
// read a raw ERROR as name "Error" with the bytes as message.
#ifndef DEDUP_CLIENT_RUN_ONCE_H_
#define DEDUP_CLIENT_RUN_ONCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/json_result.h"
#include "dedup/v1/dedup.pb.h"
#include "nlohmann/json.hpp"

namespace dedup {

class LeaseKeeper;

// What `fn` is told about the execution it owns.
struct Claim {
  uint64_t fence = 0;
  // A previous owner's lease ran out: its attempt may have partly run the
  // side effect, so `fn` may want to check before repeating it.
  bool takeover = false;
  // The operation had completed and expired, and RunOptions::accept_rerun
  // let it run again.
  bool rerun = false;
  uint32_t attempts = 0;
  int64_t lease_expires_at_ms = 0;  // Server clock, Unix ms.
  // The last progress an earlier attempt recorded (a takeover): resume from
  // it instead of starting over. nullopt when there is none.
  std::optional<v1::CheckpointInfo> last_checkpoint;

  // Records progress (a step name, up to 64 KiB of data) that a takeover
  // would receive. ABORTED with IsClaimLost() when the server refuses it (a
  // takeover happened, the record is gone or completed): stop and return.
  // With RunOptions::coalescing, it shares CheckpointBatch RPCs with the
  // process's other checkpoints (so call it from `fn`'s thread or another
  // that may block, never from a gRPC callback).
  [[nodiscard]] absl::Status Checkpoint(absl::string_view step,
                                        absl::string_view data) const;
  // The claim was lost while `fn` ran (a renewal or checkpoint was refused):
  // another owner may be running the side effect; finish quickly. RunOnce
  // then records nothing and answers ABORTED with IsClaimLost().
  [[nodiscard]] bool lost() const;

  // Set by RunOnce.
  const Client* client = nullptr;
  CoalescingClient* coalescing = nullptr;  // RunOptions::coalescing.
  std::string ns;
  std::string key;
  LeaseKeeper* keeper = nullptr;
  // A Checkpoint was refused (shared by copies of this Claim).
  std::shared_ptr<std::atomic<bool>> checkpoint_refused =
      std::make_shared<std::atomic<bool>>(false);
};

// How `fn` ended. Build with the factories.
struct ExecResult {
  enum class Kind { kSuccess, kPermanentError, kRetryable };

  // The side effect happened; `value` is stored as JSON text
  // (EncodeJsonResult) and replayed to duplicates in every language.
  static ExecResult SuccessJson(const nlohmann::json& value);
  // The side effect failed for good; the error is stored as
  // {"name","message","code"?} (EncodeStoredError, the TypeScript helper's
  // bytes) and replayed as an ERROR outcome, so duplicates never try again:
  // TypeScript and Python raise ReplayedError with this name and message,
  // C++ reads it with RunResult::ResultError. `code`: a string or a number,
  // or null for none (other JSON types are left out).
  static ExecResult PermanentErrorJson(absl::string_view name,
                                       absl::string_view message,
                                       const nlohmann::json& code = nullptr);
  // Raw forms: the bytes are stored as given (see the file comment).
  // The side effect happened; `result` is replayed to duplicates.
  static ExecResult Success(std::string result);
  // The side effect failed for good; `payload` is stored and replayed as an
  // ERROR outcome, so duplicates never try again.
  static ExecResult PermanentError(std::string payload);
  // The side effect certainly did not happen: the claim is released so the
  // next RunOnce runs `fn` afresh, and `why` is returned. An OK `why` is
  // replaced by UNKNOWN.
  static ExecResult Retryable(absl::Status why);

  Kind kind = Kind::kSuccess;
  std::string payload;        // kSuccess and kPermanentError.
  absl::Status retry_status;  // kRetryable.
};

struct RunOptions {
  uint32_t lease_ms = 0;  // 0: server default.
  uint32_t ttl_s = 0;     // 0: server default; also kept for the outcome.
  // While another owner runs the key, each Begin asks the server to wait up
  // to this long for its outcome (the server allows at most 60 s).
  absl::Duration wait_per_call = absl::Seconds(10);
  // Overall limit for waiting on another owner; `fn` itself is not bounded.
  absl::Duration deadline = absl::Minutes(2);
  // When set (not owned; must outlive the call), the first Begin, the
  // Claim's Checkpoints and the Complete go through it, sharing BeginBatch/
  // CheckpointBatch/CompleteBatch RPCs with the process's other concurrent
  // RunOnce calls, with its deadline and retry settings; Begins that wait on
  // another owner, lease renewals and Release still go through `client`.
  // Answers are the same. RunOnce blocks, so never call it with `coalescing`
  // from a gRPC callback thread.
  CoalescingClient* coalescing = nullptr;
  // Renew the lease in the background while `fn` runs (every third of the
  // lease). Off: a side effect that outlives its lease may be taken over.
  bool renew = true;
  // When the operation completed so long ago that only its tombstone is
  // left: false fails with IsExpired() (nothing runs); true runs `fn` again.
  bool accept_rerun = false;
};

struct RunResult {
  v1::Outcome outcome = v1::OUTCOME_UNSPECIFIED;  // SUCCESS or ERROR.
  // Success result or error payload, the bytes as stored (the same whether
  // `fn` ran or the outcome was replayed).
  std::string result;
  bool duplicate = false;  // True when replayed: `fn` was not called.
  uint64_t fence = 0;
  bool takeover = false;  // `fn` ran as a takeover (see Claim).

  // A SUCCESS result as JSON (DecodeJsonResult): FAILED_PRECONDITION when
  // the outcome is not SUCCESS, INVALID_ARGUMENT when `result` is not JSON
  // text (stored raw).
  [[nodiscard]] absl::StatusOr<nlohmann::json> ResultJson() const;
  // An ERROR outcome's error (DecodeStoredError: raw payloads read as name
  // "Error" with the payload as message); nullopt when the outcome is not
  // ERROR.
  [[nodiscard]] std::optional<StoredError> ResultError() const;
};

// Begin (with a fresh UUID owner) → on STARTED run `fn` and Complete with its
// outcome; on DUPLICATE return the stored outcome; on IN_USE wait for the
// other owner (Begin with wait_ms) until `options.deadline`.
//
// Errors (the RunResult is returned only when an outcome is recorded):
// - `fn` returned Retryable(why): `why`, after releasing the claim (should
//   Release fail, the claim lapses when its lease ends).
// - CONFLICT (key used with another args_hash): FAILED_PRECONDITION;
//   IsConflict() is true.
// - Complete answered STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED: ABORTED.
//   The side effect ran but this outcome was NOT recorded (the lease was
//   lost). CompleteAnswerOf() names the answer; IsStaleFence() tests for
//   STALE_FENCE.
// - EXPIRED (the operation ran and completed so long ago that its record
//   expired; only a tombstone is left) without accept_rerun:
//   FAILED_PRECONDITION naming when and how it ran; IsExpired() is true and
//   `fn` was not called.
// - The claim was lost while `fn` ran (a background renewal or a
//   Claim::Checkpoint was refused): ABORTED, IsClaimLost() true; nothing
//   was recorded or released.
// - Still IN_USE at the deadline: DEADLINE_EXCEEDED.
// - gRPC errors from Begin or Complete, code unchanged (UNAVAILABLE only after
//   the client's retries). An error from Complete means the side effect ran
//   and its outcome may not be recorded.
// - In cluster mode, a Begin or Complete whose outcome the leader could not
//   tell is retried by the client with the same owner / fence, outcome and
//   result, so a leadership change is invisible here; if the retries do not
//   settle it, ABORTED with IsOutcomeUnknown() true (from Begin: the claim
//   may exist and lapses with its lease; from Complete: the side effect ran
//   and its outcome may or may not be recorded).
[[nodiscard]] absl::StatusOr<RunResult> RunOnce(
    const Client& client, absl::string_view ns, absl::string_view key,
    absl::string_view args_hash, absl::FunctionRef<ExecResult(const Claim&)> fn,
    const RunOptions& options = {});

// True when `status` is RunOnce's answer to a CONFLICT.
[[nodiscard]] bool IsConflict(const absl::Status& status);
// The Complete answer that made RunOnce fail with ABORTED, if any.
[[nodiscard]] std::optional<v1::CompleteResponse::Status> CompleteAnswerOf(
    const absl::Status& status);
[[nodiscard]] bool IsStaleFence(const absl::Status& status);
// True when `status` is RunOnce's answer to EXPIRED.
[[nodiscard]] bool IsExpired(const absl::Status& status);
// True when RunOnce failed because the claim was lost while `fn` ran.
[[nodiscard]] bool IsClaimLost(const absl::Status& status);

}  // namespace dedup

#endif  // DEDUP_CLIENT_RUN_ONCE_H_
