// The retry loop every C++ client call runs: per-attempt deadlines, leader
// following, backoff between attempts, and safe retries of operations whose
// outcome the server could not tell. Shared by Client and dedupctl's cluster
// commands. Stateless; thread-safe as the router is.
#ifndef DEDUP_CLIENT_RETRYING_CALL_H_
#define DEDUP_CLIENT_RETRYING_CALL_H_

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "client/dedup_client.h"
#include "client/leader_router.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace dedup {

// What the loop ended with.
struct CallOutcome {
  // The last attempt's status.
  grpc::Status status;
  // Some attempt was answered ABORTED with "dedup-outcome: unknown", so an
  // earlier attempt may have taken effect even if this one says otherwise.
  bool outcome_unknown = false;
};

// One attempt against `endpoint`; the context carries its deadline, and its
// trailers are read once the attempt returns.
using AttemptFn =
    absl::FunctionRef<grpc::Status(const Endpoint&, grpc::ClientContext*)>;

// Runs `attempt` against router.Current() until it gets an answer:
// - UNAVAILABLE with "dedup-leader: ADDR" (a follower naming the leader):
//   follows to ADDR and sends again at once, within the same attempt and
//   deadline, up to options.max_leader_hops times;
// - UNAVAILABLE otherwise (connection failure, election, hops used up):
//   moves to the next configured address and retries after full-jitter
//   backoff;
// - ABORTED with "dedup-outcome: unknown": retried after backoff (at the same
//   endpoint, which will name the new leader) when `retry_unknown`, since the
//   caller's request is one that is safe to repeat; otherwise returned;
// - anything else (OK included) is the answer.
// At most options.max_attempts attempts; each attempt's deadline is
// options.deadline + `extra_deadline` from its start.
[[nodiscard]] CallOutcome RetryingCall(LeaderRouter& router,
                                       const ClientOptions& options,
                                       absl::Duration extra_deadline,
                                       bool retry_unknown, AttemptFn attempt);

}  // namespace dedup

#endif  // DEDUP_CLIENT_RETRYING_CALL_H_
