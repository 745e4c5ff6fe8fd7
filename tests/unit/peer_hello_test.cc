// The peer hello's encoding and its parser's bounds (peer_hello.h).
#include "replication/peer_hello.h"

#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

PeerHello Sample() {
  PeerHello hello;
  hello.group_id = 7;
  hello.node_id = 0x0102030405060708;
  hello.address = "127.0.0.2:7001";
  hello.token = "ops-token";
  return hello;
}

TEST(PeerHelloTest, RoundTripsAndIsLittleEndian) {
  const std::string bytes = EncodePeerHello(Sample());
  ASSERT_EQ(bytes.size(), 8u + 4 + 8 + 2 + 14 + 2 + 9);
  EXPECT_EQ(bytes.substr(0, 8), "DDPEER01");
  EXPECT_EQ(bytes[8], 7);
  EXPECT_EQ(bytes[12], 0x08);
  EXPECT_EQ(bytes[19], 0x01);
  PeerHello parsed;
  size_t consumed = 0;
  ASSERT_EQ(ParsePeerHello(bytes, &parsed, &consumed), HelloParse::kDone);
  EXPECT_EQ(consumed, bytes.size());
  EXPECT_EQ(parsed.group_id, 7u);
  EXPECT_EQ(parsed.node_id, 0x0102030405060708u);
  EXPECT_EQ(parsed.address, "127.0.0.2:7001");
  EXPECT_EQ(parsed.token, "ops-token");
}

TEST(PeerHelloTest, EveryPrefixIsIncomplete) {
  const std::string bytes = EncodePeerHello(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    PeerHello parsed;
    size_t consumed = 0;
    EXPECT_EQ(ParsePeerHello(bytes.substr(0, n), &parsed, &consumed),
              HelloParse::kIncomplete)
        << n;
  }
}

TEST(PeerHelloTest, WrongMagicIsSeenFromItsFirstByte) {
  PeerHello parsed;
  size_t consumed = 0;
  EXPECT_EQ(ParsePeerHello("G", &parsed, &consumed), HelloParse::kBadMagic);
  EXPECT_EQ(ParsePeerHello("DDPEER02", &parsed, &consumed),
            HelloParse::kBadMagic);
  // raft_uv_tcp's own handshake (protocol 1, u64) is refused as well.
  EXPECT_EQ(
      ParsePeerHello(std::string("\x01\0\0\0\0\0\0\0", 8), &parsed, &consumed),
      HelloParse::kBadMagic);
}

TEST(PeerHelloTest, LengthsOutOfBoundsAreMalformed) {
  PeerHello parsed;
  size_t consumed = 0;
  PeerHello hello = Sample();
  hello.address = "";
  EXPECT_EQ(ParsePeerHello(EncodePeerHello(hello), &parsed, &consumed),
            HelloParse::kMalformed);
  hello = Sample();
  hello.address = std::string(kMaxHelloAddress + 1, 'a');
  EXPECT_EQ(ParsePeerHello(EncodePeerHello(hello), &parsed, &consumed),
            HelloParse::kMalformed);
  hello = Sample();
  hello.token = std::string(kMaxHelloToken + 1, 't');
  EXPECT_EQ(ParsePeerHello(EncodePeerHello(hello), &parsed, &consumed),
            HelloParse::kMalformed);
  hello = Sample();
  hello.node_id = 0;
  EXPECT_EQ(ParsePeerHello(EncodePeerHello(hello), &parsed, &consumed),
            HelloParse::kMalformed);
  // A u16 length of 65535 is refused before its bytes are waited for.
  std::string huge = EncodePeerHello(Sample()).substr(0, 20) + "\xff\xff";
  EXPECT_EQ(ParsePeerHello(huge, &parsed, &consumed), HelloParse::kMalformed);
}

TEST(PeerHelloTest, LargestValidHelloParses) {
  PeerHello hello = Sample();
  hello.address = std::string(kMaxHelloAddress, 'a');
  hello.token = std::string(kMaxHelloToken, 't');
  const std::string bytes = EncodePeerHello(hello);
  EXPECT_EQ(bytes.size(), kMaxHelloBytes);
  PeerHello parsed;
  size_t consumed = 0;
  ASSERT_EQ(ParsePeerHello(bytes + "extra", &parsed, &consumed),
            HelloParse::kDone);
  EXPECT_EQ(consumed, kMaxHelloBytes);
  EXPECT_EQ(parsed.token.size(), kMaxHelloToken);
}

}  // namespace
}  // namespace dedup
