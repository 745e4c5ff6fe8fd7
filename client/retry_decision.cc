#include "client/retry_decision.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "client/backoff.h"
#include "client/leader_router.h"
#include "client/retry_delay.h"

namespace dedup {

AttemptReply ReadAttemptReply(grpc::Status status,
                              const grpc::ClientContext& context) {
  AttemptReply reply;
  reply.unknown_trailer = IsUnknownOutcomeReply(status, context);
  reply.leader = LeaderHint(context);
  reply.status = std::move(status);
  return reply;
}

RetryDecision DecideRetry(const AttemptReply& reply, const AttemptState& state,
                          const ClientOptions& options, bool retry_unknown,
                          absl::FunctionRef<double()> uniform01) {
  RetryDecision decision;
  const bool attempts_left = state.attempt < std::max(options.max_attempts, 1);
  const auto backoff = [&] {
    return FullJitterBackoff(options.backoff, state.attempt - 1, uniform01);
  };
  const grpc::StatusCode code = reply.status.error_code();
  if (code == grpc::StatusCode::UNAVAILABLE) {
    if (!reply.leader.empty() && reply.leader != state.endpoint &&
        state.hops < options.max_leader_hops) {
      decision.action = RetryAction::kFollowLeader;
      decision.leader = reply.leader;
      return decision;
    }
    decision.advance = true;
    if (attempts_left) {
      decision.action = RetryAction::kRetry;
      decision.delay = backoff();
    }
    return decision;
  }
  if (const std::optional<absl::Duration> delay =
          ServerRetryDelay(reply.status);
      delay.has_value()) {
    if (attempts_left) {
      decision.action = RetryAction::kRetry;
      decision.delay = *delay;
    }
    return decision;
  }
  if (code == grpc::StatusCode::ABORTED && reply.unknown_trailer) {
    decision.outcome_unknown = true;
    if (retry_unknown && attempts_left) {
      decision.action = RetryAction::kRetry;
      decision.delay = backoff();
    }
  }
  return decision;
}

bool ItemResendable(const absl::Status& error, bool safe_to_resend) {
  return absl::IsUnavailable(error) ||
         (absl::IsAborted(error) && safe_to_resend);
}

}  // namespace dedup
