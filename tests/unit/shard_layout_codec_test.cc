// The meta group's stored map: round trips, and refuses damaged or hostile
// bytes with DataLoss instead of crashing or allocating what they claim.
#include "replication/shard_layout_codec.h"

#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

ShardLayout Founded() {
  absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2, 3, 4}, 6, 3);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

TEST(ShardLayoutCodecTest, RoundTrips) {
  ShardLayout in = Founded();
  in.epoch = 42;
  absl::StatusOr<ShardLayout> out = DecodeShardLayout(EncodeShardLayout(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->epoch, 42u);
  ASSERT_EQ(out->groups.size(), in.groups.size());
  for (size_t g = 0; g < in.groups.size(); ++g) {
    EXPECT_EQ(out->groups[g].id, in.groups[g].id);
    EXPECT_EQ(out->groups[g].first_slot, in.groups[g].first_slot);
    EXPECT_EQ(out->groups[g].end_slot, in.groups[g].end_slot);
    EXPECT_EQ(out->groups[g].replicas, in.groups[g].replicas);
  }
}

TEST(ShardLayoutCodecTest, EveryTruncationAndAnyTrailingByteIsDataLoss) {
  const std::string bytes = EncodeShardLayout(Founded());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeShardLayout(bytes.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
  EXPECT_EQ(DecodeShardLayout(bytes + '\0').status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ShardLayoutCodecTest, HugeCountsAndBadVersionsAreRefusedUpFront) {
  std::string bytes = EncodeShardLayout(Founded());
  std::string huge_groups = bytes;
  huge_groups.replace(9, 4, "\xff\xff\xff\xff");  // group count
  EXPECT_EQ(DecodeShardLayout(huge_groups).status().code(),
            absl::StatusCode::kDataLoss);
  std::string huge_replicas = bytes;
  huge_replicas.replace(13 + 12, 4, "\xff\xff\xff\x7f");  // group 0's
  EXPECT_EQ(DecodeShardLayout(huge_replicas).status().code(),
            absl::StatusCode::kDataLoss);
  std::string version = bytes;
  version[0] = 2;
  EXPECT_EQ(DecodeShardLayout(version).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ShardLayoutCodecTest, ADecodedLayoutThatIsNotValidIsDataLoss) {
  ShardLayout gap = Founded();
  gap.groups[1].first_slot += 1;  // a slot owned by nobody
  absl::StatusOr<ShardLayout> out = DecodeShardLayout(EncodeShardLayout(gap));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(out.status().message().find("shard map: "), std::string::npos);
}

}  // namespace
}  // namespace dedup
