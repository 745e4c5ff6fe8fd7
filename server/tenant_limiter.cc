#include "server/tenant_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

// With calls in flight at the limit, when one will end is unknown: a short
// wait, then try again.
constexpr int64_t kInflightRetryMs = 50;

absl::Status OverLimit(const Tenant& tenant, absl::string_view limit,
                       absl::string_view what, int64_t retry_ms) {
  absl::Status status = absl::ResourceExhaustedError(
      absl::StrCat("tenant \"", tenant.name, "\" is over its limit of ", what,
                   "; retry in ", retry_ms, " ms"));
  status.SetPayload(kRetryDelayPayload, absl::Cord(absl::StrCat(retry_ms)));
  status.SetPayload(kLimitPayload, absl::Cord(limit));
  return status;
}

}  // namespace

std::shared_ptr<TenantLimiter::State> TenantLimiter::StateOf(
    const std::string& name) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<State>& state = states_[name];
  if (state == nullptr) state = std::make_shared<State>();
  return state;
}

absl::StatusOr<std::shared_ptr<void>> TenantLimiter::Admit(const Tenant& tenant,
                                                           int requests) {
  const TenantLimits& limits = tenant.limits;
  if (limits.rps == 0 && limits.inflight == 0) return nullptr;
  std::shared_ptr<State> state = StateOf(tenant.name);
  {
    absl::MutexLock lock(&state->mu);
    if (limits.inflight > 0 && state->inflight >= limits.inflight) {
      return OverLimit(tenant, "inflight",
                       absl::StrCat(limits.inflight, " calls in flight"),
                       kInflightRetryMs);
    }
    if (limits.rps > 0) {
      // Burst: one second's worth, or one whole batch if that is more.
      const double burst = std::max<double>(limits.rps, requests);
      const int64_t now_ms = clock_->NowMillis();
      if (state->tokens < 0) {
        state->tokens = burst;
      } else {
        const int64_t elapsed =
            std::max<int64_t>(0, now_ms - state->refilled_ms);
        state->tokens = std::min(
            burst,
            state->tokens + elapsed * static_cast<double>(limits.rps) / 1000.0);
      }
      state->refilled_ms = now_ms;
      if (state->tokens < requests) {
        const int64_t wait_ms = static_cast<int64_t>(
            std::ceil((requests - state->tokens) * 1000.0 / limits.rps));
        return OverLimit(tenant, "rps",
                         absl::StrCat(limits.rps, " requests per second"),
                         std::max<int64_t>(wait_ms, 1));
      }
      state->tokens -= requests;
    }
    ++state->inflight;
  }
  return std::shared_ptr<void>(nullptr, [state](void*) {
    absl::MutexLock lock(&state->mu);
    --state->inflight;
  });
}

}  // namespace dedup
