#include "server/auth_failure_limiter.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/tenant_limiter.h"

namespace dedup {
namespace {

TEST(PeerAddressTest, DropsThePort) {
  EXPECT_EQ(PeerAddress("ipv4:127.0.0.1:5000"), "ipv4:127.0.0.1");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:5000"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.1"), "ipv4:10.0.0.1");
  EXPECT_EQ(PeerAddress("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("unix:/tmp/s"), "unix:/tmp/s");
}

TEST(AuthFailureLimiterTest, RefusesAnAddressOverItsFailuresOnly) {
  FakeClock clock(1'000'000);
  AuthFailureLimiter limiter({/*per_s=*/2, /*burst=*/3, /*max_peers=*/16},
                             &clock);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limiter.Check("ipv4:10.0.0.1").ok()) << i;
    limiter.RecordFailure("ipv4:10.0.0.1");
  }
  const absl::Status refused = limiter.Check("ipv4:10.0.0.1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.GetPayload(kRetryDelayPayload), absl::Cord("500"));
  EXPECT_EQ(refused.GetPayload(kLimitPayload), absl::Cord("auth_failures"));
  // Another address is not affected.
  EXPECT_TRUE(limiter.Check("ipv4:10.0.0.2").ok());
  // Half a second gives one failure back.
  clock.Advance(499);
  EXPECT_FALSE(limiter.Check("ipv4:10.0.0.1").ok());
  clock.Advance(1);
  EXPECT_TRUE(limiter.Check("ipv4:10.0.0.1").ok());
  limiter.RecordFailure("ipv4:10.0.0.1");
  EXPECT_FALSE(limiter.Check("ipv4:10.0.0.1").ok());
  // Once refilled it is forgotten: checks take no lock again.
  clock.Advance(1500);
  EXPECT_EQ(limiter.peers(), 1u);
  EXPECT_TRUE(limiter.Check("ipv4:10.0.0.1").ok());
  EXPECT_EQ(limiter.peers(), 0u);
}

TEST(AuthFailureLimiterTest, ZeroRateIsNoLimit) {
  FakeClock clock(0);
  AuthFailureLimiter limiter({/*per_s=*/0, /*burst=*/1, /*max_peers=*/16},
                             &clock);
  for (int i = 0; i < 10; ++i) limiter.RecordFailure("ipv4:10.0.0.1");
  EXPECT_TRUE(limiter.Check("ipv4:10.0.0.1").ok());
  EXPECT_EQ(limiter.peers(), 0u);
}

TEST(AuthFailureLimiterTest, TracksAtMostMaxPeersForgettingRefilledFirst) {
  FakeClock clock(1'000'000);
  AuthFailureLimiter limiter({/*per_s=*/1, /*burst=*/2, /*max_peers=*/4},
                             &clock);
  // One address over its limit, then a flood of one failure each from many.
  limiter.RecordFailure("ipv4:10.0.0.1");
  limiter.RecordFailure("ipv4:10.0.0.1");
  for (int i = 0; i < 1000; ++i) {
    limiter.RecordFailure(absl::StrCat("ipv4:192.168.", i / 256, ".", i % 256));
    EXPECT_LE(limiter.peers(), 4u);
  }
  // Refilled buckets are forgotten at the next sweep, before others.
  AuthFailureLimiter sweeping({/*per_s=*/1, /*burst=*/1, /*max_peers=*/2},
                              &clock);
  sweeping.RecordFailure("ipv4:10.0.0.1");
  clock.Advance(5000);  // 10.0.0.1 has refilled
  sweeping.RecordFailure("ipv4:10.0.0.2");
  sweeping.RecordFailure("ipv4:10.0.0.3");  // full: sweeps 10.0.0.1 out
  EXPECT_EQ(sweeping.peers(), 2u);
  EXPECT_FALSE(sweeping.Check("ipv4:10.0.0.2").ok());
  EXPECT_FALSE(sweeping.Check("ipv4:10.0.0.3").ok());
}

}  // namespace
}  // namespace dedup
