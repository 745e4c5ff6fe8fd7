#include "storage/log_entry.h"

#include <string>
#include <variant>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

LogEntry SampleEntry() {
  LogEntry entry;
  entry.proposer = 3;
  entry.incarnation = 0x1234567890abcdefull;
  entry.sequence = 42;
  entry.now_ms = 1'700'000'000'123;
  LogBegin begin;
  begin.skey = "\x01\x02\x04mailk1";
  begin.params.args_hash = std::string(32, '\xab');
  begin.params.owner = "worker-1";
  begin.params.lease_ms = 60'000;
  begin.params.ttl_s = 86'400;
  LogComplete complete;
  complete.skey = "\x01\x02\x04mailk2";
  complete.params.fence = 7;
  complete.params.outcome = Outcome::kError;
  complete.params.result = "boom";
  complete.params.ttl_s = 5;
  LogRenew renew;
  renew.skey = "k3";
  renew.fence = 9;
  renew.lease_ms = 1234;
  LogGet get;
  get.skey = "k4";
  entry.ops = {begin, complete, renew, get};
  return entry;
}

TEST(LogEntryTest, RoundTripsEveryField) {
  const LogEntry in = SampleEntry();
  absl::StatusOr<LogEntry> out = DecodeLogEntry(EncodeLogEntry(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->proposer, 3u);
  EXPECT_EQ(out->incarnation, in.incarnation);
  EXPECT_EQ(out->sequence, 42u);
  EXPECT_EQ(out->now_ms, in.now_ms);
  ASSERT_EQ(out->ops.size(), 4u);
  EXPECT_EQ(TypeOf(out->ops[0]), OpType::kBegin);
  const auto& begin = std::get<LogBegin>(out->ops[0]);
  EXPECT_EQ(begin.skey, std::get<LogBegin>(in.ops[0]).skey);
  EXPECT_EQ(begin.params.args_hash,
            std::get<LogBegin>(in.ops[0]).params.args_hash);
  EXPECT_EQ(begin.params.owner, "worker-1");
  EXPECT_EQ(begin.params.lease_ms, 60'000);
  EXPECT_EQ(begin.params.ttl_s, 86'400u);
  const auto& complete = std::get<LogComplete>(out->ops[1]);
  EXPECT_EQ(complete.params.fence, 7u);
  EXPECT_EQ(complete.params.outcome, Outcome::kError);
  EXPECT_EQ(complete.params.result, "boom");
  EXPECT_EQ(complete.params.ttl_s, 5u);
  EXPECT_EQ(std::get<LogRenew>(out->ops[2]).fence, 9u);
  EXPECT_EQ(std::get<LogRenew>(out->ops[2]).lease_ms, 1234);
  EXPECT_EQ(TypeOf(out->ops[3]), OpType::kGet);
  EXPECT_EQ(std::get<LogGet>(out->ops[3]).skey, "k4");
}

// Replicas compute now + lease: an entry with an absurd lease is refused as
// damaged instead of overflowing on every replica.
TEST(LogEntryTest, RefusesLeasesOutOfRange) {
  for (int64_t lease : {int64_t{-1}, int64_t{1} << 41, INT64_MAX}) {
    LogEntry begin = SampleEntry();
    std::get<LogBegin>(begin.ops[0]).params.lease_ms = lease;
    EXPECT_EQ(DecodeLogEntry(EncodeLogEntry(begin)).status().code(),
              absl::StatusCode::kDataLoss)
        << lease;
    LogEntry renew = SampleEntry();
    std::get<LogRenew>(renew.ops[2]).lease_ms = lease;
    EXPECT_EQ(DecodeLogEntry(EncodeLogEntry(renew)).status().code(),
              absl::StatusCode::kDataLoss)
        << lease;
  }
}

TEST(LogEntryTest, RoundTripsSetMember) {
  LogEntry in;
  LogSetMember member;
  member.member_id = 4;
  member.client_address = "10.0.0.4:50051";
  in.ops.push_back(member);
  absl::StatusOr<LogEntry> out = DecodeLogEntry(EncodeLogEntry(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->ops.size(), 1u);
  EXPECT_EQ(TypeOf(out->ops[0]), OpType::kSetMember);
  EXPECT_EQ(std::get<LogSetMember>(out->ops[0]).member_id, 4u);
  EXPECT_EQ(std::get<LogSetMember>(out->ops[0]).client_address,
            "10.0.0.4:50051");
}

TEST(LogEntryTest, RoundTripsSetShardMapAndRefusesAnEpochThatDoesNotRise) {
  LogEntry in;
  in.ops.push_back(LogSetShardMap{3, 4, std::string("map\0bytes", 9)});
  absl::StatusOr<LogEntry> out = DecodeLogEntry(EncodeLogEntry(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->ops.size(), 1u);
  ASSERT_EQ(TypeOf(out->ops[0]), OpType::kSetShardMap);
  const auto& map = std::get<LogSetShardMap>(out->ops[0]);
  EXPECT_EQ(map.expected_epoch, 3u);
  EXPECT_EQ(map.epoch, 4u);
  EXPECT_EQ(map.map, std::string("map\0bytes", 9));
  EXPECT_EQ(KeyOf(out->ops[0]), nullptr);
  // A proposer never writes these; a damaged or hostile one is refused.
  for (uint64_t epoch : {3u, 2u}) {
    LogEntry bad;
    bad.ops.push_back(LogSetShardMap{3, epoch, "m"});
    EXPECT_EQ(DecodeLogEntry(EncodeLogEntry(bad)).status().code(),
              absl::StatusCode::kDataLoss)
        << epoch;
  }
}

// libraft 0.15 mishandles entries whose length is not a multiple of 8.
TEST(LogEntryTest, EncodingIsAMultipleOfEightBytes) {
  LogEntry entry = SampleEntry();
  for (int extra = 0; extra < 16; ++extra) {
    std::get<LogBegin>(entry.ops[0]).params.owner = std::string(extra, 'o');
    const std::string bytes = EncodeLogEntry(entry);
    EXPECT_EQ(bytes.size() % 8, 0u) << extra;
    EXPECT_TRUE(DecodeLogEntry(bytes).ok()) << extra;
  }
}

TEST(LogEntryTest, RefusesEveryFlippedByteAndEveryTruncation) {
  const std::string bytes = EncodeLogEntry(SampleEntry());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x40);
    absl::StatusOr<LogEntry> decoded = DecodeLogEntry(damaged);
    EXPECT_TRUE(absl::IsDataLoss(decoded.status())) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeLogEntry(bytes.substr(0, n)).ok()) << n;
  }
  // Shifted by a byte (what a misaligned buffer looks like).
  EXPECT_FALSE(DecodeLogEntry(bytes.substr(1) + '\0').ok());
}

// Entries already in logs on disk must decode the same forever: the bytes of
// one entry holding every operation type, as written by version 2, and of a
// version 1 entry (written by dedupd before version 2), both produced by an
// encoder written apart from this one (Python, from the format's comments).
constexpr char kPinnedV2Hex[] =
    "020300000000000000efcdab90785634122a000000000000007b68e5cf8b0100"
    "0008000000000000000102000000000000006b31020000000000000068310100"
    "0000000000007760ea0000000000008051010000000000010202000000000000"
    "006b320700000000000000020400000000000000626f6f6d0500000000000000"
    "e8030000000000000302000000000000006b3308000000000000000402000000"
    "000000006b340900000000000000d2040000000000000502000000000000006b"
    "350602000000000000006b36070e0000000000000031302e302e302e343a3530"
    "30353104000000000000000802000000000000006b370a000000000000000100"
    "00000000000073010000000000000064f4010000000000009030eceadc4f4a55";
constexpr char kPinnedV1Hex[] =
    "010300000000000000efcdab90785634122a000000000000007b68e5cf8b0100"
    "0004000000000000000102000000000000006b31020000000000000068310100"
    "0000000000007760ea0000000000008051010000000000020200000000000000"
    "6b320700000000000000020400000000000000626f6f6d050000000000000003"
    "02000000000000006b330800000000000000070e0000000000000031302e302e"
    "302e343a35303035310400000000000000000000000000000721375897677659";

LogEntry PinnedHeader() {
  LogEntry entry;
  entry.proposer = 3;
  entry.incarnation = 0x1234567890abcdefull;
  entry.sequence = 42;
  entry.now_ms = 1'700'000'000'123;
  return entry;
}

// What kPinnedV2Hex holds.
LogEntry PinnedEntry() {
  LogEntry entry = PinnedHeader();
  LogBegin begin;
  begin.skey = "k1";
  begin.params.args_hash = "h1";
  begin.params.owner = "w";
  begin.params.lease_ms = 60'000;
  begin.params.ttl_s = 86'400;
  begin.params.accept_rerun = true;
  LogComplete complete;
  complete.skey = "k2";
  complete.params.fence = 7;
  complete.params.outcome = Outcome::kError;
  complete.params.result = "boom";
  complete.params.ttl_s = 5;
  complete.params.retention_ms = 1000;
  LogRelease release{"k3", 8};
  LogRenew renew{"k4", 9, 1234};
  LogGet get{"k5"};
  LogForget forget{"k6"};
  LogSetMember member{4, "10.0.0.4:50051"};
  LogCheckpoint checkpoint;
  checkpoint.skey = "k7";
  checkpoint.params.fence = 10;
  checkpoint.params.step = "s";
  checkpoint.params.data = "d";
  checkpoint.params.lease_ms = 500;
  entry.ops = {begin, complete, release, renew,
               get,   forget,   member,  checkpoint};
  return entry;
}

TEST(LogEntryTest, EncodingIsPinned) {
  EXPECT_EQ(absl::BytesToHexString(EncodeLogEntry(PinnedEntry())),
            kPinnedV2Hex);
  absl::StatusOr<LogEntry> out =
      DecodeLogEntry(absl::HexStringToBytes(kPinnedV2Hex));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(absl::BytesToHexString(EncodeLogEntry(*out)), kPinnedV2Hex);
  ASSERT_EQ(out->ops.size(), 8u);
  EXPECT_TRUE(std::get<LogBegin>(out->ops[0]).params.accept_rerun);
  EXPECT_FALSE(std::get<LogBegin>(out->ops[0]).params.retry_errors);
  EXPECT_EQ(std::get<LogComplete>(out->ops[1]).params.retention_ms, 1000);
  EXPECT_EQ(TypeOf(out->ops[2]), OpType::kRelease);
  EXPECT_EQ(std::get<LogRelease>(out->ops[2]).fence, 8u);
  EXPECT_EQ(TypeOf(out->ops[5]), OpType::kForget);
  EXPECT_EQ(std::get<LogForget>(out->ops[5]).skey, "k6");
  EXPECT_EQ(std::get<LogSetMember>(out->ops[6]).member_id, 4u);
  EXPECT_EQ(TypeOf(out->ops[7]), OpType::kCheckpoint);
  const auto& checkpoint = std::get<LogCheckpoint>(out->ops[7]);
  EXPECT_EQ(checkpoint.params.fence, 10u);
  EXPECT_EQ(checkpoint.params.step, "s");
  EXPECT_EQ(checkpoint.params.data, "d");
  EXPECT_EQ(checkpoint.params.lease_ms, 500);
}

TEST(LogEntryTest, DecodesVersion1Entries) {
  absl::StatusOr<LogEntry> out =
      DecodeLogEntry(absl::HexStringToBytes(kPinnedV1Hex));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->proposer, 3u);
  EXPECT_EQ(out->sequence, 42u);
  EXPECT_EQ(out->now_ms, 1'700'000'000'123);
  ASSERT_EQ(out->ops.size(), 4u);
  ASSERT_EQ(TypeOf(out->ops[0]), OpType::kBegin);
  const auto& begin = std::get<LogBegin>(out->ops[0]);
  EXPECT_EQ(begin.skey, "k1");
  EXPECT_EQ(begin.params.owner, "w");
  EXPECT_EQ(begin.params.lease_ms, 60'000);
  EXPECT_FALSE(begin.params.accept_rerun);
  ASSERT_EQ(TypeOf(out->ops[1]), OpType::kComplete);
  EXPECT_EQ(std::get<LogComplete>(out->ops[1]).params.result, "boom");
  EXPECT_EQ(std::get<LogComplete>(out->ops[1]).params.retention_ms, 0);
  ASSERT_EQ(TypeOf(out->ops[2]), OpType::kRelease);
  EXPECT_EQ(std::get<LogRelease>(out->ops[2]).fence, 8u);
  ASSERT_EQ(TypeOf(out->ops[3]), OpType::kSetMember);
  EXPECT_EQ(std::get<LogSetMember>(out->ops[3]).member_id, 4u);
  EXPECT_EQ(std::get<LogSetMember>(out->ops[3]).client_address,
            "10.0.0.4:50051");
}

}  // namespace
}  // namespace dedup
