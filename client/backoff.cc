#include "client/backoff.h"

#include <algorithm>

#include "absl/random/random.h"

namespace dedup {

absl::Duration BackoffCeiling(const BackoffOptions& options, int attempt) {
  const absl::Duration base = std::max(options.base, absl::ZeroDuration());
  const absl::Duration cap = std::max(options.cap, absl::ZeroDuration());
  absl::Duration ceiling = std::min(base, cap);
  // Doubling step by step stops at the cap, so large attempt numbers cannot
  // overflow the shift or the duration.
  for (int i = 0;
       i < attempt && ceiling > absl::ZeroDuration() && ceiling < cap; ++i) {
    ceiling = std::min(ceiling * 2, cap);
  }
  return ceiling;
}

absl::Duration FullJitterBackoff(const BackoffOptions& options, int attempt,
                                 absl::FunctionRef<double()> uniform01) {
  // Clamp so a misbehaving source can never exceed the ceiling or go
  // negative.
  const double fraction = std::clamp(uniform01(), 0.0, 1.0);
  return BackoffCeiling(options, attempt) * fraction;
}

double ThreadLocalUniform01() {
  thread_local absl::BitGen gen;
  return absl::Uniform(absl::IntervalClosedOpen, gen, 0.0, 1.0);
}

}  // namespace dedup
