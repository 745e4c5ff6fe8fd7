#include "client/backoff.h"

#include <algorithm>

#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

BackoffOptions Defaults() { return BackoffOptions{}; }

TEST(BackoffCeilingTest, DoublesFromBaseUntilCap) {
  const BackoffOptions options = Defaults();  // 50 ms, cap 2 s.
  EXPECT_EQ(BackoffCeiling(options, 0), absl::Milliseconds(50));
  EXPECT_EQ(BackoffCeiling(options, 1), absl::Milliseconds(100));
  EXPECT_EQ(BackoffCeiling(options, 2), absl::Milliseconds(200));
  EXPECT_EQ(BackoffCeiling(options, 5), absl::Milliseconds(1600));
  EXPECT_EQ(BackoffCeiling(options, 6), absl::Seconds(2));
  EXPECT_EQ(BackoffCeiling(options, 7), absl::Seconds(2));
}

TEST(BackoffCeilingTest, HugeAttemptsStayAtCap) {
  EXPECT_EQ(BackoffCeiling(Defaults(), 63), absl::Seconds(2));
  EXPECT_EQ(BackoffCeiling(Defaults(), 1 << 30), absl::Seconds(2));
}

TEST(BackoffCeilingTest, NegativeAttemptCountsAsFirst) {
  EXPECT_EQ(BackoffCeiling(Defaults(), -3), absl::Milliseconds(50));
}

TEST(BackoffCeilingTest, BaseAboveCapIsCapped) {
  EXPECT_EQ(BackoffCeiling({absl::Seconds(5), absl::Seconds(1)}, 0),
            absl::Seconds(1));
}

TEST(BackoffCeilingTest, ZeroBaseNeverWaits) {
  EXPECT_EQ(BackoffCeiling({absl::ZeroDuration(), absl::Seconds(1)}, 1 << 30),
            absl::ZeroDuration());
}

TEST(FullJitterBackoffTest, ScalesCeilingByTheRandomDraw) {
  const BackoffOptions options = Defaults();
  EXPECT_EQ(FullJitterBackoff(options, 3, [] { return 0.0; }),
            absl::ZeroDuration());
  EXPECT_EQ(FullJitterBackoff(options, 3, [] { return 0.5; }),
            absl::Milliseconds(200));
  EXPECT_EQ(FullJitterBackoff(options, 10, [] { return 0.25; }),
            absl::Milliseconds(500));
  EXPECT_LT(FullJitterBackoff(options, 3, [] { return 0.999999; }),
            absl::Milliseconds(400));
}

TEST(FullJitterBackoffTest, DrawsExactlyOnceFromTheSource) {
  int calls = 0;
  (void)FullJitterBackoff(Defaults(), 2, [&] {
    ++calls;
    return 0.3;
  });
  EXPECT_EQ(calls, 1);
}

TEST(FullJitterBackoffTest, ClampsAMisbehavingSource) {
  EXPECT_EQ(FullJitterBackoff(Defaults(), 0, [] { return -1.0; }),
            absl::ZeroDuration());
  EXPECT_EQ(FullJitterBackoff(Defaults(), 0, [] { return 7.0; }),
            absl::Milliseconds(50));
}

TEST(FullJitterBackoffTest, RealDrawsSpreadOverTheWholeRange) {
  absl::BitGen gen;
  const absl::Duration ceiling = BackoffCeiling(Defaults(), 4);  // 800 ms.
  absl::Duration low = absl::InfiniteDuration();
  absl::Duration high = absl::ZeroDuration();
  absl::Duration sum;
  constexpr int kDraws = 2000;
  for (int i = 0; i < kDraws; ++i) {
    const absl::Duration d = FullJitterBackoff(Defaults(), 4, [&] {
      return absl::Uniform(absl::IntervalClosedOpen, gen, 0.0, 1.0);
    });
    ASSERT_GE(d, absl::ZeroDuration());
    ASSERT_LT(d, ceiling);
    low = std::min(low, d);
    high = std::max(high, d);
    sum += d;
  }
  // Full jitter, not "equal jitter": draws reach close to zero and close to
  // the ceiling, and average about half of it.
  EXPECT_LT(low, ceiling * 0.05);
  EXPECT_GT(high, ceiling * 0.95);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(sum / kDraws),
              absl::ToDoubleMilliseconds(ceiling / 2), 40.0);
}

}  // namespace
}  // namespace dedup
