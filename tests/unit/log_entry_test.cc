#include "storage/log_entry.h"

#include <string>

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

}  // namespace
}  // namespace dedup
