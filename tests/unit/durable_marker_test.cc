// The durable marker's file: what is written reads back, marks never go
// back, and a damaged or edited file is told apart from a missing one.
#include "storage/durable_marker.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

TEST(DurableMarkerTest, EncodedMarksDecodeAndHaveOneSize) {
  const DurableMark small{1, 4, 0};
  const DurableMark large{UINT64_MAX, 123456, 987654321};
  for (const DurableMark& mark : {small, large}) {
    const std::optional<DurableMark> back =
        DecodeDurableMark(EncodeDurableMark(mark));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->sequence, mark.sequence);
    EXPECT_EQ(back->wal_number, mark.wal_number);
    EXPECT_EQ(back->wal_bytes, mark.wal_bytes);
  }
  // One size: an update overwrites the whole previous text.
  EXPECT_EQ(EncodeDurableMark(small).size(), EncodeDurableMark(large).size());
}

TEST(DurableMarkerTest, ChangedDigitsAreNotAMark) {
  std::string text = EncodeDurableMark({12345, 7, 100});
  const size_t at = text.find("12345");
  ASSERT_NE(at, std::string::npos);
  text[at] = '9';
  EXPECT_FALSE(DecodeDurableMark(text).has_value());
  EXPECT_FALSE(DecodeDurableMark("").has_value());
  EXPECT_FALSE(DecodeDurableMark("dedup-durable v1 sequence=").has_value());
}

TEST(DurableMarkerTest, WrittenMarksReadBackAndNeverGoBack) {
  absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-marker");
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<std::optional<DurableMark>> none = DurableMarker::Read(*dir);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  {
    absl::StatusOr<std::unique_ptr<DurableMarker>> marker =
        DurableMarker::Create(*dir, {10, 4, 100});
    ASSERT_TRUE(marker.ok()) << marker.status();
    (*marker)->Update({20, 4, 300});
    (*marker)->Update({15, 4, 200});  // below: ignored
    EXPECT_EQ((*marker)->last().sequence, 20u);
    ASSERT_TRUE((*marker)->Sync().ok());
  }
  absl::StatusOr<std::optional<DurableMark>> read = DurableMarker::Read(*dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->sequence, 20u);
  EXPECT_EQ((*read)->wal_bytes, 300u);

  const std::string path = *dir + "/" + kDurableMarkerName;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
  absl::StatusOr<std::optional<DurableMark>> damaged =
      DurableMarker::Read(*dir);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(damaged.status().message(), path))
      << damaged.status();
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace dedup
