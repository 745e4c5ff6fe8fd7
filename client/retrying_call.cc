#include "client/retrying_call.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "client/backoff.h"
#include "client/retry_delay.h"

namespace dedup {

CallOutcome RetryingCall(LeaderRouter& router, const ClientOptions& options,
                         absl::Duration extra_deadline, bool retry_unknown,
                         AttemptFn attempt) {
  const int max_attempts = std::max(options.max_attempts, 1);
  CallOutcome outcome;
  for (int attempts = 1;; ++attempts) {
    // Redirects are part of the attempt: they share its deadline, so a chain
    // of hops cannot outlast what the caller allowed for one attempt.
    const absl::Time deadline = absl::Now() + options.deadline + extra_deadline;
    bool server_delayed = false;
    for (int hops = 0;; ++hops) {
      const std::shared_ptr<const Endpoint> endpoint = router.Current();
      if (endpoint == nullptr) {
        outcome.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "no server address configured");
        return outcome;
      }
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      outcome.status = attempt(*endpoint, &context);
      if (outcome.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        const std::string leader = LeaderHint(context);
        // A node naming itself is on its way out (say, stopping): look
        // elsewhere rather than loop on it.
        if (!leader.empty() && leader != endpoint->address &&
            hops < options.max_leader_hops) {
          router.FollowLeader(*endpoint, leader);
          continue;
        }
        router.Advance(*endpoint);
        break;
      }
      if (std::optional<absl::Duration> delay =
              ServerRetryDelay(outcome.status);
          delay.has_value()) {
        // Over a limit (a tenant's): the server says when to come back.
        if (attempts >= max_attempts) return outcome;
        absl::SleepFor(*delay);
        server_delayed = true;
        break;
      }
      if (IsUnknownOutcomeReply(outcome.status, context)) {
        outcome.outcome_unknown = true;
        if (!retry_unknown) return outcome;
        break;
      }
      return outcome;
    }
    if (attempts >= max_attempts) return outcome;
    if (!server_delayed) {
      absl::SleepFor(FullJitterBackoff(options.backoff, attempts - 1,
                                       ThreadLocalUniform01));
    }
  }
}

}  // namespace dedup
