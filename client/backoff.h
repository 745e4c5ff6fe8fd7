// Exponential backoff with full jitter, kept apart from the client so the
// arithmetic can be tested with an injected random source.
#ifndef DEDUP_CLIENT_BACKOFF_H_
#define DEDUP_CLIENT_BACKOFF_H_

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace dedup {

struct BackoffOptions {
  absl::Duration base = absl::Milliseconds(50);
  absl::Duration cap = absl::Seconds(2);
};

// The largest delay allowed before retry number `attempt` (0-based):
// min(cap, base * 2^attempt). Never overflows; negative attempts count as 0.
[[nodiscard]] absl::Duration BackoffCeiling(const BackoffOptions& options,
                                            int attempt);

// Full jitter: uniform(0, BackoffCeiling(options, attempt)). `uniform01` must
// return a value in [0, 1); it is the only source of randomness, so tests can
// pin it. Pure; thread-safe if `uniform01` is.
[[nodiscard]] absl::Duration FullJitterBackoff(
    const BackoffOptions& options, int attempt,
    absl::FunctionRef<double()> uniform01);

// A uniform value in [0, 1) from a per-thread generator: the production
// source for FullJitterBackoff. Thread-safe.
[[nodiscard]] double ThreadLocalUniform01();

}  // namespace dedup

#endif  // DEDUP_CLIENT_BACKOFF_H_
