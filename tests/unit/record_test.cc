#include "storage/record.h"

#include <string>

#include "gtest/gtest.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

Record SampleRecord() {
  Record r;
  r.state = RecordState::kCompleted;
  r.outcome = Outcome::kError;
  r.attempts = 3;
  r.expire_at_ms = 1'700'000'123'456;
  r.lease_until_ms = 1'700'000'000'001;
  r.fence = 0x0102030405060708ull;
  r.created_at_ms = 1'699'999'999'999;
  r.completed_at_ms = 1'700'000'000'500;
  r.ttl_s = 86400;
  r.args_hash = std::string("\x00\x01\xfe\xff", 4);
  r.owner = "owner-uuid";
  r.result = std::string("payload\0with nul", 16);
  return r;
}

TEST(RecordCodecTest, RoundTripsEveryField) {
  const Record r = SampleRecord();
  absl::StatusOr<Record> decoded = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, r);
}

TEST(RecordCodecTest, RoundTripsEmptyVariableParts) {
  Record r;
  r.fence = 1;
  absl::StatusOr<Record> decoded = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, r);
}

// The TTL compaction filter reads expire_at in place; moving it breaks every
// database written before. This test pins the on-disk layout.
TEST(RecordCodecTest, ExpireAtIsPinnedAtOffsetEightLittleEndian) {
  ASSERT_EQ(kExpireAtOffset, 8u);
  ASSERT_EQ(kRecordHeaderSize, 56u);
  Record r = SampleRecord();
  r.expire_at_ms = 0x1122334455667788;
  const std::string encoded = EncodeRecord(r);
  EXPECT_EQ(static_cast<uint8_t>(encoded[0]), kRecordFormatVersion);
  const unsigned char expected[8] = {0x88, 0x77, 0x66, 0x55,
                                     0x44, 0x33, 0x22, 0x11};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(static_cast<unsigned char>(encoded[8 + i]), expected[i])
        << "byte " << i;
  }
  ASSERT_TRUE(PeekExpireAt(encoded).has_value());
  EXPECT_EQ(*PeekExpireAt(encoded), 0x1122334455667788);
}

TEST(RecordCodecTest, RejectsTruncatedAndUnknownValues) {
  const std::string encoded = EncodeRecord(SampleRecord());
  EXPECT_EQ(DecodeRecord(encoded.substr(0, 10)).status().code(),
            absl::StatusCode::kDataLoss);
  // Header intact but args_hash/owner cut short.
  EXPECT_EQ(
      DecodeRecord(encoded.substr(0, kRecordHeaderSize + 2)).status().code(),
      absl::StatusCode::kDataLoss);
  std::string bad_version = encoded;
  bad_version[0] = 9;
  EXPECT_EQ(DecodeRecord(bad_version).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(PeekExpireAt(bad_version).has_value());
  std::string bad_state = encoded;
  bad_state[1] = 7;
  EXPECT_EQ(DecodeRecord(bad_state).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(PeekExpireAt("short").has_value());
}

TEST(StorageKeyTest, LayoutIsSlotThenLengthPrefixedNamespaceThenKey) {
  const std::string skey = EncodeStorageKey("mail", "k1");
  const uint32_t slot = SlotOf("mail", "k1");
  ASSERT_LT(slot, kSlotCount);
  ASSERT_EQ(skey.size(), 2u + 1u + 4u + 2u);
  EXPECT_EQ(
      (static_cast<uint8_t>(skey[0]) << 8) | static_cast<uint8_t>(skey[1]),
      static_cast<int>(slot));
  EXPECT_EQ(static_cast<uint8_t>(skey[2]), 4);
  EXPECT_EQ(skey.substr(3), "mailk1");
  EXPECT_TRUE(IsRecordKey(skey));
  EXPECT_FALSE(IsRecordKey(FenceReservationKey()));
}

TEST(StorageKeyTest, NamespaceBoundaryChangesTheKey) {
  // ("ab","c") and ("a","bc") must never share a record.
  EXPECT_NE(EncodeStorageKey("ab", "c"), EncodeStorageKey("a", "bc"));
}

TEST(StorageKeyTest, SlotIsStableFnv1a) {
  // Pinned: smart clients in other languages compute the same slot.
  // FNV-1a 64 of "ns\0key" mod 16384.
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : std::string("ns\0key", 6)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  EXPECT_EQ(SlotOf("ns", "key"), h % 16384);
}

}  // namespace
}  // namespace dedup
