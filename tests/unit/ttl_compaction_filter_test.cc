#include "storage/ttl_compaction_filter.h"

#include "gtest/gtest.h"
#include "storage/record.h"
#include "storage/storage_key.h"

namespace dedup {
namespace ttl_compaction_filter_test {
namespace {

constexpr int64_t kGraceMs = 60'000;

std::string ValueExpiringAt(int64_t expire_at_ms) {
  Record r;
  r.expire_at_ms = expire_at_ms;
  r.lease_until_ms = expire_at_ms;
  r.fence = 1;
  return EncodeRecord(r);
}

TEST(TtlCompactionFilterTest, KeepsUntilExpiryPlusGraceThenDrops) {
  const std::string key = EncodeStorageKey("ns", "k");
  const std::string value = ValueExpiringAt(1000);
  EXPECT_FALSE(ShouldDropExpired(key, value, 999, kGraceMs));
  // Expired for readers, but still inside the grace period.
  EXPECT_FALSE(ShouldDropExpired(key, value, 1000, kGraceMs));
  EXPECT_FALSE(ShouldDropExpired(key, value, 1000 + kGraceMs - 1, kGraceMs));
  EXPECT_TRUE(ShouldDropExpired(key, value, 1000 + kGraceMs, kGraceMs));
}

// A damaged or hand-made value expiring at the end of time is kept (the sum
// expire_at + grace used to overflow and drop it).
TEST(TtlCompactionFilterTest, KeepsAValueThatExpiresAtTheEndOfTime) {
  const std::string key = EncodeStorageKey("ns", "k");
  EXPECT_FALSE(
      ShouldDropExpired(key, ValueExpiringAt(INT64_MAX), 1000, kGraceMs));
  EXPECT_FALSE(ShouldDropExpired(key, ValueExpiringAt(INT64_MAX - 1),
                                 INT64_MAX / 2, kGraceMs));
}

TEST(TtlCompactionFilterTest, NeverDropsMetadataOrUndecodableValues) {
  EXPECT_FALSE(
      ShouldDropExpired(FenceReservationKey(), "123", INT64_MAX / 2, kGraceMs));
  const std::string key = EncodeStorageKey("ns", "k");
  EXPECT_FALSE(ShouldDropExpired(key, "garbage", INT64_MAX / 2, kGraceMs));
  std::string future_version = ValueExpiringAt(1);
  future_version[0] = 2;
  EXPECT_FALSE(ShouldDropExpired(key, future_version, INT64_MAX / 2, kGraceMs));
}

TEST(TtlCompactionFilterTest, FilterUsesInjectedClockAndCountsDrops) {
  FakeClock clock(0);
  TtlCompactionFilter filter(&clock, /*grace_ms=*/0);
  const std::string key = EncodeStorageKey("ns", "k");
  const std::string value = ValueExpiringAt(5000);
  std::string new_value;
  bool changed = false;
  EXPECT_FALSE(filter.Filter(0, key, value, &new_value, &changed));
  EXPECT_EQ(filter.dropped(), 0u);
  clock.Set(5000);
  EXPECT_TRUE(filter.Filter(0, key, value, &new_value, &changed));
  EXPECT_FALSE(changed);
  EXPECT_EQ(filter.dropped(), 1u);
}

}  // namespace
}  // namespace ttl_compaction_filter_test
}  // namespace dedup
