#include "client/run_once.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/lease_keeper.h"
#include "client/uuid.h"

namespace dedup {
namespace {

// Payload URLs carrying the authority's answer on RunOnce errors, so callers
// can branch on it without parsing messages.
constexpr char kBeginAnswerUrl[] = "dedup.v1/BeginResponse.Status";
constexpr char kCompleteAnswerUrl[] = "dedup.v1/CompleteResponse.Status";
constexpr char kClaimLostUrl[] = "dedup.v1/claim-lost";

// The server never waits longer than this per Begin.
constexpr absl::Duration kMaxWaitPerCall = absl::Seconds(60);

std::string Describe(absl::string_view ns, absl::string_view key) {
  return absl::StrCat("\"", ns, "\"/\"", key, "\"");
}

absl::Status ConflictError(absl::string_view ns, absl::string_view key,
                           const v1::BeginResponse& begin) {
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      "dedup: key ", Describe(ns, key),
      " is CONFLICT: already used with a different args_hash (fence ",
      begin.fence(), ")"));
  status.SetPayload(kBeginAnswerUrl,
                    absl::Cord(v1::BeginResponse::Status_Name(begin.status())));
  return status;
}

absl::Status ExpiredError(absl::string_view ns, absl::string_view key,
                          const v1::BeginResponse& begin) {
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      "dedup: key ", Describe(ns, key), " is EXPIRED: it already ran (fence ",
      begin.fence(), ", outcome ", v1::Outcome_Name(begin.outcome()),
      ", completed at ",
      absl::FormatTime(absl::FromUnixMillis(begin.completed_at())),
      ") and its record and result expired; set accept_rerun to run it "
      "again"));
  status.SetPayload(kBeginAnswerUrl,
                    absl::Cord(v1::BeginResponse::Status_Name(begin.status())));
  return status;
}

absl::Status ClaimLostError(absl::string_view ns, absl::string_view key,
                            uint64_t fence, absl::string_view how) {
  absl::Status status = absl::AbortedError(
      absl::StrCat("dedup: the claim on ", Describe(ns, key), " with fence ",
                   fence, " was lost while it ran (", how,
                   "); another owner may run it: nothing was recorded"));
  status.SetPayload(kClaimLostUrl, absl::Cord("lost"));
  return status;
}

absl::Status LostClaimError(absl::string_view ns, absl::string_view key,
                            uint64_t fence,
                            const v1::CompleteResponse& complete) {
  const std::string answer =
      v1::CompleteResponse::Status_Name(complete.status());
  absl::Status status = absl::AbortedError(absl::StrCat(
      "dedup: Complete for ", Describe(ns, key), " with fence ", fence,
      " answered ", answer, " (current fence ", complete.fence(),
      "): the side effect ran but its outcome was NOT recorded"));
  status.SetPayload(kCompleteAnswerUrl, absl::Cord(answer));
  return status;
}

absl::StatusOr<v1::BeginResponse> SendBegin(const Client& client,
                                            const RunOptions& options,
                                            absl::string_view ns,
                                            absl::string_view key,
                                            absl::string_view args_hash,
                                            const BeginOptions& begin) {
  // A batch never waits, so only a Begin that must not wait can join one.
  if (options.coalescing == nullptr || begin.wait_ms > 0) {
    return client.Begin(ns, key, args_hash, begin);
  }
  BeginBatchItem item;
  item.ns = std::string(ns);
  item.key = std::string(key);
  item.args_hash = std::string(args_hash);
  item.owner = begin.owner;
  item.lease_ms = begin.lease_ms;
  item.ttl_s = begin.ttl_s;
  return options.coalescing->Begin(item);
}

absl::StatusOr<v1::CompleteResponse> SendComplete(
    const Client& client, const RunOptions& options, absl::string_view ns,
    absl::string_view key, uint64_t fence, v1::Outcome outcome,
    const std::string& payload) {
  if (options.coalescing == nullptr) {
    return client.Complete(ns, key, fence, outcome, payload);
  }
  CompleteBatchItem item;
  item.ns = std::string(ns);
  item.key = std::string(key);
  item.fence = fence;
  item.outcome = outcome;
  item.result = payload;
  return options.coalescing->Complete(item);
}

absl::StatusOr<RunResult> Execute(
    const Client& client, const RunOptions& options, absl::string_view ns,
    absl::string_view key, const v1::BeginResponse& begin,
    absl::FunctionRef<ExecResult(const Claim&)> fn) {
  Claim claim;
  claim.fence = begin.fence();
  claim.takeover = begin.takeover();
  claim.rerun = begin.rerun();
  claim.attempts = begin.attempts();
  claim.lease_expires_at_ms = begin.lease_expires_at();
  if (begin.has_checkpoint()) claim.last_checkpoint = begin.checkpoint();
  claim.client = &client;
  claim.coalescing = options.coalescing;
  claim.ns = std::string(ns);
  claim.key = std::string(key);
  std::optional<LeaseKeeper> keeper;
  if (options.renew) {
    // The lease asked for, else what the server granted (its clock against
    // ours: a skew only moves the renewals).
    int64_t lease_ms = options.lease_ms;
    if (lease_ms == 0) {
      lease_ms = begin.lease_expires_at() - absl::ToUnixMillis(absl::Now());
    }
    if (lease_ms < 300) lease_ms = 3000;
    keeper.emplace(client, claim.ns, claim.key, claim.fence, options.lease_ms,
                   absl::Milliseconds(lease_ms / 3));
  }
  claim.keeper = keeper.has_value() ? &*keeper : nullptr;
  ExecResult exec = fn(claim);
  if (keeper.has_value()) keeper->Stop();
  if (claim.lost()) {
    return ClaimLostError(ns, key, claim.fence,
                          "a renewal or checkpoint was refused");
  }

  if (exec.kind == ExecResult::Kind::kRetryable) {
    // Best effort: if this fails the lease simply runs out, and the caller's
    // own failure is the more useful thing to report.
    (void)client.Release(ns, key, claim.fence);
    return exec.retry_status.ok()
               ? absl::UnknownError("retryable failure reported with OK")
               : exec.retry_status;
  }

  const v1::Outcome outcome =
      exec.kind == ExecResult::Kind::kSuccess ? v1::SUCCESS : v1::ERROR;
  absl::StatusOr<v1::CompleteResponse> complete = SendComplete(
      client, options, ns, key, claim.fence, outcome, exec.payload);
  if (!complete.ok()) {
    absl::Status error(
        complete.status().code(),
        absl::StrCat("dedup: Complete for ", Describe(ns, key),
                     " failed after the side effect ran; its outcome may not "
                     "be recorded: ",
                     complete.status().message()));
    // Keeps what the client attached (IsOutcomeUnknown).
    complete.status().ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) {
          error.SetPayload(url, payload);
        });
    return error;
  }
  if (complete->status() != v1::CompleteResponse::OK) {
    return LostClaimError(ns, key, claim.fence, *complete);
  }
  RunResult run;
  run.outcome = outcome;
  run.result = std::move(exec.payload);
  run.fence = claim.fence;
  run.takeover = claim.takeover;
  return run;
}

}  // namespace

ExecResult ExecResult::SuccessJson(const nlohmann::json& value) {
  return Success(EncodeJsonResult(value));
}

ExecResult ExecResult::PermanentErrorJson(absl::string_view name,
                                          absl::string_view message,
                                          const nlohmann::json& code) {
  return PermanentError(EncodeStoredError(
      StoredError{std::string(name), std::string(message), code}));
}

ExecResult ExecResult::Success(std::string result) {
  ExecResult r;
  r.kind = Kind::kSuccess;
  r.payload = std::move(result);
  return r;
}

ExecResult ExecResult::PermanentError(std::string payload) {
  ExecResult r;
  r.kind = Kind::kPermanentError;
  r.payload = std::move(payload);
  return r;
}

ExecResult ExecResult::Retryable(absl::Status why) {
  ExecResult r;
  r.kind = Kind::kRetryable;
  r.retry_status = std::move(why);
  return r;
}

absl::StatusOr<nlohmann::json> RunResult::ResultJson() const {
  if (outcome != v1::SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("dedup: the outcome is ", v1::Outcome_Name(outcome),
                     ", not SUCCESS: use ResultError()"));
  }
  return DecodeJsonResult(result);
}

std::optional<StoredError> RunResult::ResultError() const {
  if (outcome != v1::ERROR) return std::nullopt;
  return DecodeStoredError(result);
}

absl::StatusOr<RunResult> RunOnce(
    const Client& client, absl::string_view ns, absl::string_view key,
    absl::string_view args_hash, absl::FunctionRef<ExecResult(const Claim&)> fn,
    const RunOptions& options) {
  const absl::Time deadline = absl::Now() + options.deadline;
  BeginOptions begin_options;
  begin_options.lease_ms = options.lease_ms;
  begin_options.ttl_s = options.ttl_s;
  begin_options.accept_rerun = options.accept_rerun;
  for (;;) {
    // A fresh owner per claim attempt: the client's UNAVAILABLE retries of
    // this Begin reuse it, so a lost answer is re-entered, not seen as
    // IN_USE.
    begin_options.owner = NewUuidV4();
    const absl::Time sent = absl::Now();
    absl::StatusOr<v1::BeginResponse> begin =
        SendBegin(client, options, ns, key, args_hash, begin_options);
    if (!begin.ok()) return begin.status();

    switch (begin->status()) {
      case v1::BeginResponse::STARTED:
        return Execute(client, options, ns, key, *begin, fn);
      case v1::BeginResponse::DUPLICATE: {
        RunResult run;
        run.outcome = begin->outcome();
        run.result = std::move(*begin->mutable_result());
        run.duplicate = true;
        run.fence = begin->fence();
        return run;
      }
      case v1::BeginResponse::CONFLICT:
        return ConflictError(ns, key, *begin);
      case v1::BeginResponse::EXPIRED:
        return ExpiredError(ns, key, *begin);
      case v1::BeginResponse::IN_USE:
        break;
      default:
        return absl::InternalError(
            absl::StrCat("dedup: Begin for ", Describe(ns, key),
                         " answered unknown status ", begin->status()));
    }

    const absl::Time now = absl::Now();
    // A server that answered IN_USE well before the wait we asked for is
    // not waiting (e.g. an older build); pause so we do not spin on it.
    if (begin_options.wait_ms > 0 &&
        now - sent < absl::Milliseconds(begin_options.wait_ms) / 2) {
      absl::SleepFor(std::min(
          absl::Milliseconds(std::max<uint32_t>(begin->retry_after_ms(), 10)),
          deadline - now));
    }
    const absl::Duration remaining = deadline - absl::Now();
    const int64_t wait_ms = absl::ToInt64Milliseconds(
        std::min({options.wait_per_call, remaining, kMaxWaitPerCall}));
    if (wait_ms < 1) {
      return absl::DeadlineExceededError(
          absl::StrCat("dedup: key ", Describe(ns, key),
                       " still IN_USE by another owner (fence ", begin->fence(),
                       ") at the RunOnce deadline"));
    }
    begin_options.wait_ms = static_cast<uint32_t>(wait_ms);
  }
}

bool IsConflict(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return false;
  auto answer = status.GetPayload(kBeginAnswerUrl);
  return answer.has_value() && *answer == "CONFLICT";
}

std::optional<v1::CompleteResponse::Status> CompleteAnswerOf(
    const absl::Status& status) {
  if (status.code() != absl::StatusCode::kAborted) return std::nullopt;
  auto answer = status.GetPayload(kCompleteAnswerUrl);
  v1::CompleteResponse::Status parsed;
  if (!answer.has_value() ||
      !v1::CompleteResponse::Status_Parse(std::string(*answer), &parsed)) {
    return std::nullopt;
  }
  return parsed;
}

bool IsStaleFence(const absl::Status& status) {
  return CompleteAnswerOf(status) == v1::CompleteResponse::STALE_FENCE;
}

bool IsExpired(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return false;
  auto answer = status.GetPayload(kBeginAnswerUrl);
  return answer.has_value() && *answer == "EXPIRED";
}

bool IsClaimLost(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         status.GetPayload(kClaimLostUrl).has_value();
}

absl::Status Claim::Checkpoint(absl::string_view step,
                               absl::string_view data) const {
  if (client == nullptr) {
    return absl::FailedPreconditionError("dedup: Claim not made by RunOnce");
  }
  absl::StatusOr<v1::CheckpointResponse> recorded;
  if (coalescing != nullptr) {
    CheckpointBatchItem item;
    item.ns = ns;
    item.key = key;
    item.fence = fence;
    item.step = std::string(step);
    item.data = std::string(data);
    recorded = coalescing->Checkpoint(item);
  } else {
    recorded = client->Checkpoint(ns, key, fence, step, data);
  }
  if (!recorded.ok()) return recorded.status();
  if (recorded->status() == v1::CheckpointResponse::OK) return absl::OkStatus();
  checkpoint_refused->store(true);
  return ClaimLostError(
      ns, key, fence,
      absl::StrCat("Checkpoint answered ",
                   v1::CheckpointResponse::Status_Name(recorded->status())));
}

bool Claim::lost() const {
  return checkpoint_refused->load() || (keeper != nullptr && keeper->lost());
}

}  // namespace dedup
