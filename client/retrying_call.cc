#include "client/retrying_call.h"

#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "client/backoff.h"
#include "client/retry_decision.h"

namespace dedup {

CallOutcome RetryingCall(LeaderRouter& router, const ClientOptions& options,
                         absl::Duration extra_deadline, bool retry_unknown,
                         AttemptFn attempt) {
  CallOutcome outcome;
  AttemptState state;
  for (state.attempt = 1;; ++state.attempt) {
    // Redirects are part of the attempt: they share its deadline, so a chain
    // of hops cannot outlast what the caller allowed for one attempt.
    const absl::Time deadline = absl::Now() + options.deadline + extra_deadline;
    RetryDecision decision;
    for (state.hops = 0;; ++state.hops) {
      const std::shared_ptr<const Endpoint> endpoint = router.Current();
      if (endpoint == nullptr) {
        outcome.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "no server address configured");
        return outcome;
      }
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      AttemptReply reply =
          ReadAttemptReply(attempt(*endpoint, &context), context);
      state.endpoint = endpoint->address;
      decision = DecideRetry(reply, state, options, retry_unknown,
                             ThreadLocalUniform01);
      outcome.status = std::move(reply.status);
      if (decision.outcome_unknown) outcome.outcome_unknown = true;
      if (decision.action == RetryAction::kFollowLeader) {
        router.FollowLeader(*endpoint, decision.leader);
        continue;
      }
      if (decision.advance) router.Advance(*endpoint);
      break;
    }
    if (decision.action != RetryAction::kRetry) return outcome;
    absl::SleepFor(decision.delay);
  }
}

}  // namespace dedup
