#include "storage/log_entry.h"

#include <string>

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
  LogOp begin;
  begin.type = OpType::kBegin;
  begin.skey = "\x01\x02\x04mailk1";
  begin.begin.args_hash = std::string(32, '\xab');
  begin.begin.owner = "worker-1";
  begin.begin.lease_ms = 60'000;
  begin.begin.ttl_s = 86'400;
  LogOp complete;
  complete.type = OpType::kComplete;
  complete.skey = "\x01\x02\x04mailk2";
  complete.complete.fence = 7;
  complete.complete.outcome = Outcome::kError;
  complete.complete.result = "boom";
  complete.complete.ttl_s = 5;
  LogOp renew;
  renew.type = OpType::kRenew;
  renew.skey = "k3";
  renew.fence = 9;
  renew.lease_ms = 1234;
  LogOp get;
  get.type = OpType::kGet;
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
  EXPECT_EQ(out->ops[0].type, OpType::kBegin);
  EXPECT_EQ(out->ops[0].skey, in.ops[0].skey);
  EXPECT_EQ(out->ops[0].begin.args_hash, in.ops[0].begin.args_hash);
  EXPECT_EQ(out->ops[0].begin.owner, "worker-1");
  EXPECT_EQ(out->ops[0].begin.lease_ms, 60'000);
  EXPECT_EQ(out->ops[0].begin.ttl_s, 86'400u);
  EXPECT_EQ(out->ops[1].complete.fence, 7u);
  EXPECT_EQ(out->ops[1].complete.outcome, Outcome::kError);
  EXPECT_EQ(out->ops[1].complete.result, "boom");
  EXPECT_EQ(out->ops[1].complete.ttl_s, 5u);
  EXPECT_EQ(out->ops[2].fence, 9u);
  EXPECT_EQ(out->ops[2].lease_ms, 1234);
  EXPECT_EQ(out->ops[3].type, OpType::kGet);
}

// Replicas compute now + lease: an entry with an absurd lease is refused as
// damaged instead of overflowing on every replica.
TEST(LogEntryTest, RefusesLeasesOutOfRange) {
  for (int64_t lease : {int64_t{-1}, int64_t{1} << 41, INT64_MAX}) {
    LogEntry begin = SampleEntry();
    begin.ops[0].begin.lease_ms = lease;
    EXPECT_EQ(DecodeLogEntry(EncodeLogEntry(begin)).status().code(),
              absl::StatusCode::kDataLoss)
        << lease;
    LogEntry renew = SampleEntry();
    renew.ops[2].lease_ms = lease;
    EXPECT_EQ(DecodeLogEntry(EncodeLogEntry(renew)).status().code(),
              absl::StatusCode::kDataLoss)
        << lease;
  }
}

TEST(LogEntryTest, RoundTripsSetMember) {
  LogEntry in;
  LogOp member;
  member.type = OpType::kSetMember;
  member.member_id = 4;
  member.skey = "10.0.0.4:50051";
  in.ops.push_back(member);
  absl::StatusOr<LogEntry> out = DecodeLogEntry(EncodeLogEntry(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->ops.size(), 1u);
  EXPECT_EQ(out->ops[0].type, OpType::kSetMember);
  EXPECT_EQ(out->ops[0].member_id, 4u);
  EXPECT_EQ(out->ops[0].skey, "10.0.0.4:50051");
}

// libraft 0.15 mishandles entries whose length is not a multiple of 8.
TEST(LogEntryTest, EncodingIsAMultipleOfEightBytes) {
  LogEntry entry = SampleEntry();
  for (int extra = 0; extra < 16; ++extra) {
    entry.ops[0].begin.owner = std::string(extra, 'o');
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
  LogOp begin;
  begin.type = OpType::kBegin;
  begin.skey = "k1";
  begin.begin.args_hash = "h1";
  begin.begin.owner = "w";
  begin.begin.lease_ms = 60'000;
  begin.begin.ttl_s = 86'400;
  begin.begin.accept_rerun = true;
  LogOp complete;
  complete.type = OpType::kComplete;
  complete.skey = "k2";
  complete.complete.fence = 7;
  complete.complete.outcome = Outcome::kError;
  complete.complete.result = "boom";
  complete.complete.ttl_s = 5;
  complete.complete.retention_ms = 1000;
  LogOp release;
  release.type = OpType::kRelease;
  release.skey = "k3";
  release.fence = 8;
  LogOp renew;
  renew.type = OpType::kRenew;
  renew.skey = "k4";
  renew.fence = 9;
  renew.lease_ms = 1234;
  LogOp get;
  get.type = OpType::kGet;
  get.skey = "k5";
  LogOp forget;
  forget.type = OpType::kForget;
  forget.skey = "k6";
  LogOp member;
  member.type = OpType::kSetMember;
  member.skey = "10.0.0.4:50051";
  member.member_id = 4;
  LogOp checkpoint;
  checkpoint.type = OpType::kCheckpoint;
  checkpoint.skey = "k7";
  checkpoint.checkpoint.fence = 10;
  checkpoint.checkpoint.step = "s";
  checkpoint.checkpoint.data = "d";
  checkpoint.checkpoint.lease_ms = 500;
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
  EXPECT_TRUE(out->ops[0].begin.accept_rerun);
  EXPECT_FALSE(out->ops[0].begin.retry_errors);
  EXPECT_EQ(out->ops[1].complete.retention_ms, 1000);
  EXPECT_EQ(out->ops[2].type, OpType::kRelease);
  EXPECT_EQ(out->ops[2].fence, 8u);
  EXPECT_EQ(out->ops[5].type, OpType::kForget);
  EXPECT_EQ(out->ops[5].skey, "k6");
  EXPECT_EQ(out->ops[6].member_id, 4u);
  EXPECT_EQ(out->ops[7].type, OpType::kCheckpoint);
  EXPECT_EQ(out->ops[7].checkpoint.fence, 10u);
  EXPECT_EQ(out->ops[7].checkpoint.step, "s");
  EXPECT_EQ(out->ops[7].checkpoint.data, "d");
  EXPECT_EQ(out->ops[7].checkpoint.lease_ms, 500);
}

TEST(LogEntryTest, DecodesVersion1Entries) {
  absl::StatusOr<LogEntry> out =
      DecodeLogEntry(absl::HexStringToBytes(kPinnedV1Hex));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->proposer, 3u);
  EXPECT_EQ(out->sequence, 42u);
  EXPECT_EQ(out->now_ms, 1'700'000'000'123);
  ASSERT_EQ(out->ops.size(), 4u);
  EXPECT_EQ(out->ops[0].type, OpType::kBegin);
  EXPECT_EQ(out->ops[0].skey, "k1");
  EXPECT_EQ(out->ops[0].begin.owner, "w");
  EXPECT_EQ(out->ops[0].begin.lease_ms, 60'000);
  EXPECT_FALSE(out->ops[0].begin.accept_rerun);
  EXPECT_EQ(out->ops[1].type, OpType::kComplete);
  EXPECT_EQ(out->ops[1].complete.result, "boom");
  EXPECT_EQ(out->ops[1].complete.retention_ms, 0);
  EXPECT_EQ(out->ops[2].fence, 8u);
  EXPECT_EQ(out->ops[3].type, OpType::kSetMember);
  EXPECT_EQ(out->ops[3].member_id, 4u);
  EXPECT_EQ(out->ops[3].skey, "10.0.0.4:50051");
}

}  // namespace
}  // namespace dedup
