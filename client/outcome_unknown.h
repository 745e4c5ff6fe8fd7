// The status the C++ client returns when it cannot tell whether an operation
// took effect: the server proposed it, then lost leadership ("dedup-outcome:
// unknown"), and the safe retries did not settle it. Such a call must never be
// read as "nothing happened" (UNAVAILABLE): the claim, outcome or release may
// exist on the authority. Stateless.
#ifndef DEDUP_CLIENT_OUTCOME_UNKNOWN_H_
#define DEDUP_CLIENT_OUTCOME_UNKNOWN_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dedup {

// ABORTED, "<what>: outcome unknown: ... (last error: <last>)", with a payload
// that IsOutcomeUnknown recognises. `last` is the final attempt's error, or
// the ABORTED reply itself when it was not retried.
[[nodiscard]] absl::Status OutcomeUnknownError(absl::string_view what,
                                               const absl::Status& last);

// True for statuses made by OutcomeUnknownError (also after RunOnce re-worded
// the message, since it keeps payloads).
[[nodiscard]] bool IsOutcomeUnknown(const absl::Status& status);

}  // namespace dedup

#endif  // DEDUP_CLIENT_OUTCOME_UNKNOWN_H_
