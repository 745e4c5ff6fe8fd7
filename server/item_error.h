// The one place an ItemError (a batch item's or a session operation's
// refusal) is built from a status, so every answer names the leader and an
// unknown outcome the same way.
#ifndef DEDUP_SERVER_ITEM_ERROR_H_
#define DEDUP_SERVER_ITEM_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup {

// ItemError.reason of an operation that may or may not have taken effect.
inline constexpr char kItemErrorOutcomeUnknown[] = "OUTCOME_UNKNOWN";

// Fills `out` from `status`: code, `message`, reason OUTCOME_UNKNOWN when
// the status carries kOutcomeUnknownPayload, leader when it carries
// kLeaderAddressPayload (storage/store.h), retry_after_ms when it carries
// kRetryDelayPayload (server/tenant_limiter.h). Leaves other reasons alone.
void FillItemError(const absl::Status& status, std::string message,
                   v1::ItemError* out);
inline void FillItemError(const absl::Status& status, v1::ItemError* out) {
  FillItemError(status, std::string(status.message()), out);
}

}  // namespace dedup

#endif  // DEDUP_SERVER_ITEM_ERROR_H_
