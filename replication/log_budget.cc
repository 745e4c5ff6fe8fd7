#include "replication/log_budget.h"

#include <algorithm>

namespace dedup {
namespace {

unsigned Fit(double entries, unsigned max) {
  const double low = std::min(LogBudget::kMinEntries, max);
  return static_cast<unsigned>(
      std::clamp(entries, low, static_cast<double>(max)));
}

}  // namespace

LogBudget::LogBudget(uint64_t budget_bytes, unsigned max_threshold,
                     unsigned max_trailing)
    : budget_bytes_(budget_bytes),
      max_threshold_(max_threshold),
      max_trailing_(max_trailing),
      threshold_(max_threshold),
      trailing_(max_trailing) {}

void LogBudget::Observe(size_t entry_bytes) {
  constexpr double kWeight = 1.0 / 32;
  if (average_entry_bytes_ == 0) {
    average_entry_bytes_ = entry_bytes;
  } else {
    average_entry_bytes_ += (entry_bytes - average_entry_bytes_) * kWeight;
  }
  Refit();
}

void LogBudget::Refit() {
  const double per_half =
      budget_bytes_ / 2.0 / std::max(average_entry_bytes_, 1.0);
  threshold_ = Fit(per_half, max_threshold_);
  trailing_ = Fit(per_half, max_trailing_);
}

}  // namespace dedup
