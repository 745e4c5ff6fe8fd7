// The retry rule of the C++ client, as one pure function: what to do after
// an attempt ended. RetryingCall (Client's calls, dedupctl's cluster
// commands) and CoalescingLane (CoalescingClient's batches) both obey it;
// the lane and Client's batch calls also share ItemResendable for the items
// of a batch answer.
//
// The rule, for the status an attempt ended with:
// 1. UNAVAILABLE with a "dedup-leader: ADDR" trailer naming another node,
//    and fewer than options.max_leader_hops redirects in this attempt:
//    follow to ADDR and send again at once, within the same attempt (its
//    deadline, its attempt number). A node naming itself is on its way out
//    (say, stopping), so that hint is ignored.
// 2. Any other UNAVAILABLE (connection failure, election, hops used up):
//    move the router off the endpoint, then retry after full-jitter backoff
//    if attempts remain.
// 3. RESOURCE_EXHAUSTED with a google.rpc.RetryInfo (a tenant over its
//    limits): retry after the server's delay (capped, see ServerRetryDelay),
//    not backoff, if attempts remain.
// 4. ABORTED with "dedup-outcome: unknown" (the leader proposed it, then
//    lost leadership): the outcome is unknown; retry after backoff, at the
//    same endpoint (which will name the new leader), only when the caller
//    says re-sending is safe (`retry_unknown`) and attempts remain.
// 5. Anything else, OK included, is the answer.
// At most options.max_attempts attempts (at least 1).
//
// The batch lane passes retry_unknown = false: a whole batch's unknown
// outcome is settled item by item (ItemResendable), since only some items
// (a Begin with an owner, any Complete or Checkpoint) are safe to re-send.
#ifndef DEDUP_CLIENT_RETRY_DECISION_H_
#define DEDUP_CLIENT_RETRY_DECISION_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/dedup_client.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace dedup {

// What the rule reads of a finished attempt: its status (code and details)
// and the two trailers dedupd uses to steer clients.
struct AttemptReply {
  grpc::Status status;
  // "dedup-leader", or "" when the server sent none.
  std::string leader;
  // "dedup-outcome: unknown" was sent (meaningful with ABORTED only).
  bool unknown_trailer = false;
};

// The reply of a call that has finished on `context` (trailers are read).
[[nodiscard]] AttemptReply ReadAttemptReply(grpc::Status status,
                                            const grpc::ClientContext& context);

// Where the call stands when the attempt ended.
struct AttemptState {
  // The address the attempt went to ("" for a caller-supplied channel).
  std::string endpoint;
  // The attempt that just ended, 1-based.
  int attempt = 1;
  // Leader redirects already followed within this attempt.
  int hops = 0;
};

enum class RetryAction {
  // The status is the call's answer (success or final error).
  kAnswer,
  // Send again at once to `leader`, within the same attempt.
  kFollowLeader,
  // Start the next attempt after `delay`.
  kRetry,
};

struct RetryDecision {
  RetryAction action = RetryAction::kAnswer;
  // kFollowLeader: the leader's address.
  std::string leader;
  // kRetry: how long to wait first.
  absl::Duration delay = absl::ZeroDuration();
  // The endpoint failed or knows no leader: move the router past it
  // (LeaderRouter::Advance) whatever the action.
  bool advance = false;
  // The reply was an unknown outcome, so an earlier or this attempt may have
  // taken effect whatever later attempts say.
  bool outcome_unknown = false;
};

// The rule above. `uniform01` (values in [0, 1)) is the backoff's only
// randomness, so tests can pin it. Pure; thread-safe if `uniform01` is.
[[nodiscard]] RetryDecision DecideRetry(const AttemptReply& reply,
                                        const AttemptState& state,
                                        const ClientOptions& options,
                                        bool retry_unknown,
                                        absl::FunctionRef<double()> uniform01);

// Whether an item of a batch answer refused with `error` goes again in the
// next round (if rounds remain): UNAVAILABLE (nothing happened), or ABORTED
// (outcome unknown) when the item is `safe_to_resend`. Pure.
[[nodiscard]] bool ItemResendable(const absl::Status& error,
                                  bool safe_to_resend);

}  // namespace dedup

#endif  // DEDUP_CLIENT_RETRY_DECISION_H_
