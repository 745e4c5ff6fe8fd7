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

// Runs `attempt` against router.Current() until it gets an answer, doing
// after each attempt what DecideRetry (client/retry_decision.h) says:
// follow the leader within the attempt, move the router on, wait and try
// again, or return. An unknown outcome is retried only when `retry_unknown`
// (the caller's request is one that is safe to repeat).
// At most options.max_attempts attempts; each attempt's deadline is
// options.deadline + `extra_deadline` from its start.
[[nodiscard]] CallOutcome RetryingCall(LeaderRouter& router,
                                       const ClientOptions& options,
                                       absl::Duration extra_deadline,
                                       bool retry_unknown, AttemptFn attempt);

}  // namespace dedup

#endif  // DEDUP_CLIENT_RETRYING_CALL_H_
