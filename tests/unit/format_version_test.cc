// The data dir's format file: what a dir without one is, which versions are
// readable, what a damaged file is, and that recording it writes only when
// needed.
#include "storage/format_version.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace dedup::storage {
namespace {

class FormatVersionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-format");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string FilePath() const {
    return absl::StrCat(dir_, "/", kFormatFileName);
  }
  void Write(const std::string& text) const {
    std::ofstream(FilePath(), std::ios::binary) << text;
  }
  std::string Read() const {
    std::ifstream in(FilePath(), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
};

TEST_F(FormatVersionTest, NoFileOrNoDirIsTheOldestFormatUnrecorded) {
  for (const std::string& dir : {dir_, dir_ + "/missing"}) {
    absl::StatusOr<DataFormat> format = ReadDataFormat(dir);
    ASSERT_TRUE(format.ok()) << format.status();
    EXPECT_EQ(format->version, kOldestReadableFormatVersion);
    EXPECT_FALSE(format->recorded);
    EXPECT_TRUE(CheckDataFormatReadable(dir, *format).ok());
  }
}

TEST_F(FormatVersionTest, RecordingWritesTheVersionOnlyWhenNeeded) {
  absl::StatusOr<DataFormat> before = ReadDataFormat(dir_);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(RecordDataFormat(dir_, *before).ok());
  EXPECT_EQ(Read(), absl::StrCat(kDataFormatVersion, "\n"));
  absl::StatusOr<DataFormat> after = ReadDataFormat(dir_);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->version, kDataFormatVersion);
  EXPECT_TRUE(after->recorded);
  // Already current: nothing is written (the file keeps other text).
  Write(absl::StrCat(" ", kDataFormatVersion, " \n"));
  ASSERT_TRUE(RecordDataFormat(dir_, *after).ok());
  EXPECT_EQ(Read(), absl::StrCat(" ", kDataFormatVersion, " \n"));
}

TEST_F(FormatVersionTest, ANewerFormatIsRefusedNamingBothVersions) {
  Write(absl::StrCat(kDataFormatVersion + 1, "\n"));
  absl::StatusOr<DataFormat> format = ReadDataFormat(dir_);
  ASSERT_TRUE(format.ok()) << format.status();
  const absl::Status s = CheckDataFormatReadable(dir_, *format);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("has format ", kDataFormatVersion + 1)))
      << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("reads formats ", kOldestReadableFormatVersion,
                                " to ", kDataFormatVersion)))
      << s;
}

TEST_F(FormatVersionTest, ATooOldFormatIsRefused) {
  const DataFormat old{kOldestReadableFormatVersion - 1, true};
  EXPECT_EQ(CheckDataFormatReadable(dir_, old).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(FormatVersionTest, AFileWithoutAVersionIsDamaged) {
  for (const char* text : {"", "\n", "two\n", "0\n", "1x\n", "-1\n"}) {
    Write(text);
    absl::StatusOr<DataFormat> format = ReadDataFormat(dir_);
    EXPECT_EQ(format.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_TRUE(absl::StrContains(format.status().message(), FilePath()))
        << format.status();
  }
}

}  // namespace
}  // namespace dedup::storage
