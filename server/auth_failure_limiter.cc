#include "server/auth_failure_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/tenant_limiter.h"

namespace dedup {
namespace {

// A full sweep for refilled buckets at most this often: a flood from more
// addresses than the table holds must not make every insertion a sweep.
constexpr int64_t kSweepIntervalMs = 1000;

}  // namespace

absl::string_view PeerAddress(absl::string_view peer) {
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return peer;
  }
  const size_t colon = peer.rfind(':');
  if (colon == 4) return peer;  // no port
  const absl::string_view host = peer.substr(0, colon);
  // IPv6: the port follows the bracket ("[::1]:5000", or "%5B::1%5D:5000"
  // URI-escaped); a colon inside it is the address's own.
  if (absl::StartsWith(peer, "ipv6:") && !absl::EndsWith(host, "]") &&
      !absl::EndsWith(host, "%5D")) {
    return peer;
  }
  return host;
}

AuthFailureLimiter::AuthFailureLimiter(AuthFailureLimits limits,
                                       const Clock* clock)
    : limits_(limits), clock_(clock) {}

void AuthFailureLimiter::Refill(Bucket* bucket, int64_t now_ms) const {
  if (now_ms <= bucket->refilled_ms) return;
  bucket->failures_left = std::min<double>(
      limits_.burst,
      bucket->failures_left +
          limits_.per_s * (now_ms - bucket->refilled_ms) / 1000.0);
  bucket->refilled_ms = now_ms;
}

absl::Status AuthFailureLimiter::Check(absl::string_view address) const {
  if (limits_.per_s <= 0 || peers() == 0) return absl::OkStatus();
  const int64_t now_ms = clock_->NowMillis();
  double missing = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = buckets_.find(address);
    if (it == buckets_.end()) return absl::OkStatus();
    Refill(&it->second, now_ms);
    if (it->second.failures_left >= limits_.burst) {
      // Refilled: forgotten, so that calls go back to taking no lock.
      buckets_.erase(it);
      peers_.store(buckets_.size(), std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (it->second.failures_left >= 1) return absl::OkStatus();
    missing = 1 - it->second.failures_left;
  }
  const int64_t retry_ms =
      std::max<int64_t>(1, std::ceil(missing * 1000 / limits_.per_s));
  absl::Status status = absl::ResourceExhaustedError(
      absl::StrCat("too many failed authentications from ", address,
                   "; retry in ", retry_ms, " ms"));
  status.SetPayload(kRetryDelayPayload, absl::Cord(absl::StrCat(retry_ms)));
  status.SetPayload(kLimitPayload, absl::Cord("auth_failures"));
  return status;
}

void AuthFailureLimiter::RecordFailure(absl::string_view address) {
  if (limits_.per_s <= 0) return;
  const int64_t now_ms = clock_->NowMillis();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(address);
  if (it == buckets_.end()) {
    if (buckets_.size() >= limits_.max_peers) Evict(now_ms);
    it = buckets_
             .emplace(std::string(address),
                      Bucket{static_cast<double>(limits_.burst), now_ms})
             .first;
    peers_.store(buckets_.size(), std::memory_order_relaxed);
  }
  Refill(&it->second, now_ms);
  it->second.failures_left = std::max(0.0, it->second.failures_left - 1);
}

void AuthFailureLimiter::Evict(int64_t now_ms) {
  if (now_ms - last_sweep_ms_ >= kSweepIntervalMs) {
    last_sweep_ms_ = now_ms;
    absl::erase_if(buckets_, [&](auto& entry) {
      Refill(&entry.second, now_ms);
      return entry.second.failures_left >= limits_.burst;
    });
  }
  if (buckets_.size() >= limits_.max_peers) buckets_.erase(buckets_.begin());
  peers_.store(buckets_.size(), std::memory_order_relaxed);
}

}  // namespace dedup
