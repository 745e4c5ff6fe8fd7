// Failed authentications per peer address: a token bucket of failures per
// address (refilled at `per_s`, holding up to `burst`). Once an address has
// spent its failures, its calls are refused before any credential is looked
// at, with RESOURCE_EXHAUSTED and a retry delay, so a wrong-token flood costs
// the server a hash lookup and a counter per call rather than a login
// attempt, and guesses are held to `per_s` per address. Calls with a valid
// credential from that address are refused too while it is over (a shared
// NAT address shares the limit).
//
// Memory is bounded: at most `max_peers` addresses are tracked; an address
// whose bucket has refilled is forgotten (when next checked, or to make
// room), then an arbitrary one.
#ifndef DEDUP_SERVER_AUTH_FAILURE_LIMITER_H_
#define DEDUP_SERVER_AUTH_FAILURE_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"

namespace dedup {

struct AuthFailureLimits {
  // Failures an address regains per second; 0: no limit.
  double per_s = 10;
  // Failures an address may make in a row (at least 1).
  int burst = 100;
  // Addresses tracked at once.
  size_t max_peers = 16384;
};

// "ipv4:10.0.0.1" of gRPC's peer string "ipv4:10.0.0.1:5000" (the port
// dropped: a client gets a new one per connection); other forms unchanged.
[[nodiscard]] absl::string_view PeerAddress(absl::string_view peer);

// Thread-safe.
class AuthFailureLimiter {
 public:
  // `clock` is not owned and must outlive the limiter.
  AuthFailureLimiter(AuthFailureLimits limits, const Clock* clock);

  // OK, or RESOURCE_EXHAUSTED (kRetryDelayPayload: when the address has a
  // failure to spend again) when `address` has none left. Takes no lock
  // while no address is tracked.
  [[nodiscard]] absl::Status Check(absl::string_view address) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Spends one of `address`'s failures.
  void RecordFailure(absl::string_view address) ABSL_LOCKS_EXCLUDED(mu_);
  // Addresses tracked now.
  size_t peers() const { return peers_.load(std::memory_order_relaxed); }

 private:
  struct Bucket {
    double failures_left = 0;
    int64_t refilled_ms = 0;
  };
  // Refills `bucket` up to now.
  void Refill(Bucket* bucket, int64_t now_ms) const;
  // Makes room for one more address (mu_ held).
  void Evict(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AuthFailureLimits limits_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  // Mutable: Check refills the buckets it looks at.
  mutable absl::flat_hash_map<std::string, Bucket> buckets_
      ABSL_GUARDED_BY(mu_);
  int64_t last_sweep_ms_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::atomic<size_t> peers_{0};
};

}  // namespace dedup

#endif  // DEDUP_SERVER_AUTH_FAILURE_LIMITER_H_
