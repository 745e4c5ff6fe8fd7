// Per-tenant limits (the tenants file's "limits"): requests per second (a
// token bucket whose burst is one second's worth; a batch item counts as a
// request) and calls in flight at once. A tenant past either gets
// RESOURCE_EXHAUSTED naming the limit, with the time to wait as a RetryInfo
// in the status details (error_details.proto), so one tenant's flood slows
// that tenant, not the others.
#ifndef DEDUP_SERVER_TENANT_LIMITER_H_
#define DEDUP_SERVER_TENANT_LIMITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "server/tenants.h"
#include "storage/clock.h"

namespace dedup {

// Payload of a RESOURCE_EXHAUSTED refusal: the retry delay in decimal
// milliseconds; ToGrpcStatus turns it into a RetryInfo, FillItemError into
// ItemError.retry_after_ms.
inline constexpr absl::string_view kRetryDelayPayload = "dedup.retry_delay_ms";

// The delay `status` carries under kRetryDelayPayload; nullopt without one.
inline std::optional<uint32_t> RetryDelayMs(const absl::Status& status) {
  uint32_t ms = 0;
  auto delay = status.GetPayload(kRetryDelayPayload);
  if (!delay.has_value() || !absl::SimpleAtoi(delay->Flatten(), &ms)) {
    return std::nullopt;
  }
  return ms;
}
// Payload of the same refusal: which limit, "rps" or "inflight" (a metric
// label).
inline constexpr absl::string_view kLimitPayload = "dedup.limit";

// Thread-safe. State is kept per tenant name, so a reload that changes a
// tenant's limits keeps its bucket and in-flight count.
class TenantLimiter {
 public:
  // `clock` is not owned and must outlive the limiter.
  explicit TenantLimiter(const Clock* clock) : clock_(clock) {}

  // Admits a call of `requests` requests from `tenant`: the returned handle
  // holds its in-flight slot until destroyed (keep it until the call is
  // answered). RESOURCE_EXHAUSTED with kRetryDelayPayload when over a limit.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<void>> Admit(
      const Tenant& tenant, int requests) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct State {
    absl::Mutex mu;
    double tokens ABSL_GUARDED_BY(mu) = -1;  // < 0: not started
    int64_t refilled_ms ABSL_GUARDED_BY(mu) = 0;
    uint64_t inflight ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<State> StateOf(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Clock* const clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<State>> states_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_SERVER_TENANT_LIMITER_H_
