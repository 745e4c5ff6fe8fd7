#include "bench/load/histogram.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dedup::bench {
namespace {

TEST(HistogramTest, EmptyIsZero) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.QuantileUs(0.99), 0);
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (int v = 1; v <= 50; ++v) h.Record(v);
  EXPECT_EQ(h.QuantileUs(0.5), 25);
  EXPECT_EQ(h.QuantileUs(1.0), 50);
}

// Every quantile is within the bucket resolution (1/64) of the exact one,
// and never below it (upper bucket edges: the report is never optimistic).
TEST(HistogramTest, QuantilesMatchSortedSampleWithinResolution) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(6.0, 1.5);  // ~400 us, long tail
  std::vector<int64_t> sample;
  Histogram h;
  for (int i = 0; i < 100'000; ++i) {
    const int64_t v = 1 + static_cast<int64_t>(dist(rng));
    sample.push_back(v);
    h.Record(v);
  }
  std::sort(sample.begin(), sample.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double exact =
        static_cast<double>(sample[static_cast<size_t>(q * sample.size()) - 1]);
    EXPECT_GE(h.QuantileUs(q), exact) << q;
    EXPECT_LE(h.QuantileUs(q), exact * (1 + 1.0 / 32) + 1) << q;
  }
  EXPECT_EQ(h.max_us(), sample.back());
}

TEST(HistogramTest, MergeAddsCounts) {
  Histogram a, b;
  a.Record(100);
  b.Record(1'000'000);
  a.Merge(b);
  EXPECT_EQ(a.count(), 2u);
  EXPECT_EQ(a.max_us(), 1'000'000);
  EXPECT_GE(a.QuantileUs(1.0), 1'000'000);
}

}  // namespace
}  // namespace dedup::bench
