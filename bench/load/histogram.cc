#include "bench/load/histogram.h"

#include <algorithm>

namespace dedup::bench {

int Histogram::BucketOf(uint64_t us) {
  // Values below 2^kSubBits map linearly; above, each octave is split into
  // 2^kSubBits equal parts.
  if (us < (1u << kSubBits)) return static_cast<int>(us);
  const int msb = 63 - __builtin_clzll(us);
  const int octave = msb - kSubBits + 1;
  const int sub =
      static_cast<int>((us >> (msb - kSubBits)) & ((1 << kSubBits) - 1));
  return std::min(kBuckets - 1, (octave << kSubBits) + sub);
}

double Histogram::UpperEdgeOf(int bucket) {
  const int octave = bucket >> kSubBits;
  const int sub = bucket & ((1 << kSubBits) - 1);
  // The largest integer the bucket holds: below 2^kSubBits buckets are
  // single values.
  if (octave == 0) return sub;
  const double base =
      static_cast<double>(uint64_t{1} << (octave + kSubBits - 1));
  return base + (sub + 1) * (base / (1 << kSubBits)) - 1;
}

void Histogram::Record(int64_t us) {
  const uint64_t v = us < 1 ? 1 : static_cast<uint64_t>(us);
  ++buckets_[BucketOf(v)];
  ++count_;
  sum_us_ += static_cast<double>(v);
  max_us_ = std::max<int64_t>(max_us_, static_cast<int64_t>(v));
}

void Histogram::Merge(const Histogram& other) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_us_ += other.sum_us_;
  max_us_ = std::max(max_us_, other.max_us_);
}

double Histogram::mean_us() const {
  return count_ == 0 ? 0 : sum_us_ / static_cast<double>(count_);
}

double Histogram::QuantileUs(double q) const {
  if (count_ == 0) return 0;
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(q * static_cast<double>(count_) + 0.5));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      return std::min(UpperEdgeOf(i), static_cast<double>(max_us_));
    }
  }
  return static_cast<double>(max_us_);
}

}  // namespace dedup::bench
