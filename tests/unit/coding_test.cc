// storage/coding.h: byte layouts pinned, round trips at the edges.
#include "storage/coding.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

std::string Bytes(std::initializer_list<unsigned char> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

TEST(CodingTest, FixedIsLittleEndian) {
  std::string out;
  PutFixed16(&out, 0x0102);
  EXPECT_EQ(out, Bytes({0x02, 0x01}));
  out.clear();
  PutFixed32(&out, 0x01020304u);
  EXPECT_EQ(out, Bytes({0x04, 0x03, 0x02, 0x01}));
  out.clear();
  PutFixed64(&out, 0x0102030405060708ull);
  EXPECT_EQ(out, Bytes({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));

  char buf[8];
  EncodeFixed64(buf, 0x8000000000000001ull);
  EXPECT_EQ(std::string(buf, 8), Bytes({0x01, 0, 0, 0, 0, 0, 0, 0x80}));
  EncodeFixed32(buf, 0xA0B0C0D0u);
  EXPECT_EQ(std::string(buf, 4), Bytes({0xD0, 0xC0, 0xB0, 0xA0}));
  EncodeFixed16(buf, 0xFF01);
  EXPECT_EQ(std::string(buf, 2), Bytes({0x01, 0xFF}));
}

TEST(CodingTest, BigEndianPutsTheHighByteFirst) {
  std::string out;
  PutBigEndian16(&out, 0x0102);
  EXPECT_EQ(out, Bytes({0x01, 0x02}));
  out.clear();
  PutBigEndian64(&out, 0x0102030405060708ull);
  EXPECT_EQ(out, Bytes({0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
}

TEST(CodingTest, DecodesWhatItEncodes) {
  // High bits set in every byte too: a sign extension of a char would show.
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x80}, uint64_t{0xFF},
                     uint64_t{0x8081828384858687}, uint64_t{0xFEDCBA9876543210},
                     std::numeric_limits<uint64_t>::max()}) {
    std::string out;
    PutFixed64(&out, v);
    PutFixed32(&out, static_cast<uint32_t>(v));
    PutFixed16(&out, static_cast<uint16_t>(v));
    PutBigEndian64(&out, v);
    PutBigEndian16(&out, static_cast<uint16_t>(v));
    ASSERT_EQ(out.size(), 8u + 4 + 2 + 8 + 2);
    const char* p = out.data();
    EXPECT_EQ(DecodeFixed64(p), v);
    EXPECT_EQ(DecodeFixed32(p + 8), static_cast<uint32_t>(v));
    EXPECT_EQ(DecodeFixed16(p + 12), static_cast<uint16_t>(v));
    EXPECT_EQ(DecodeBigEndian64(p + 14), v);
    EXPECT_EQ(DecodeBigEndian16(p + 22), static_cast<uint16_t>(v));
  }
}

TEST(CodingTest, BigEndianOrderIsNumericOrder) {
  // Why keys use it: bytewise comparison sorts the numbers.
  std::string a, b, c;
  PutBigEndian16(&a, 0x00FF);
  PutBigEndian16(&b, 0x0100);
  PutBigEndian16(&c, 0xFFFF);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  std::string d, e;
  PutBigEndian64(&d, 0x00FFFFFFFFFFFFFFull);
  PutBigEndian64(&e, 0x0100000000000000ull);
  EXPECT_LT(d, e);
}

TEST(CodingTest, EncodeWritesOnlyItsWidth) {
  char buf[10];
  std::fill(buf, buf + 10, '\x55');
  EncodeFixed32(buf + 1, 0);
  EXPECT_EQ(std::string(buf, 10),
            Bytes({0x55, 0, 0, 0, 0, 0x55, 0x55, 0x55, 0x55, 0x55}));
  EncodeBigEndian16(buf + 6, 0);
  EXPECT_EQ(std::string(buf, 10),
            Bytes({0x55, 0, 0, 0, 0, 0x55, 0, 0, 0x55, 0x55}));
}

}  // namespace
}  // namespace dedup
