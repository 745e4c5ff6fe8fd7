// A latency histogram with log-linear buckets (HdrHistogram-like): 64
// sub-buckets per power of two, so any recorded value is reported within
// ~1.6% of its true value, from 1 us to ~1 hour, in fixed memory. Cheap to
// record into (no allocation, no lock); one per recording thread, merged at
// the end.
#ifndef DEDUP_BENCH_LOAD_HISTOGRAM_H_
#define DEDUP_BENCH_LOAD_HISTOGRAM_H_

#include <array>
#include <cstdint>

namespace dedup::bench {

class Histogram {
 public:
  // Records one value in microseconds (values < 1 count as 1).
  void Record(int64_t us);
  void Merge(const Histogram& other);

  uint64_t count() const { return count_; }
  int64_t max_us() const { return max_us_; }
  double mean_us() const;
  // The value at quantile q in [0, 1], in microseconds (the upper edge of its
  // bucket, so never optimistic).
  double QuantileUs(double q) const;

 private:
  static constexpr int kSubBits = 6;   // 64 sub-buckets per octave
  static constexpr int kOctaves = 33;  // up to 2^32 us
  static constexpr int kBuckets = kOctaves << kSubBits;
  static int BucketOf(uint64_t us);
  static double UpperEdgeOf(int bucket);

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  double sum_us_ = 0;
  int64_t max_us_ = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_HISTOGRAM_H_
