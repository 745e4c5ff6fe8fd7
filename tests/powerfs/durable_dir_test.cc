// storage/durable_dir.h over powerfs: a directory tree made by
// CreateDirectoriesDurably survives a power cut with the synced files in it;
// one made by plain mkdir -p does not (the reason the function exists).
#include "storage/durable_dir.h"

#include <filesystem>

#include "powerfs_fixture.h"

namespace {

using powerfs_testing::PowerFsTest;
using powerfs_testing::ReadFile;
using powerfs_testing::SyncPath;
using powerfs_testing::Write;

TEST_F(PowerFsTest, DurablyCreatedDirectoriesSurviveAPowerCut) {
  Mount();
  ASSERT_TRUE(dedup::CreateDirectoriesDurably(M("data/raft")).ok());
  Write(M("data/raft/metadata1"), "term", /*sync=*/true);
  SyncPath(M("data/raft"));
  Cycle();
  EXPECT_EQ(ReadFile(M("data/raft/metadata1")), "term");
  // Again on an existing tree: nothing to make, still OK.
  EXPECT_TRUE(dedup::CreateDirectoriesDurably(M("data/raft")).ok());
}

TEST_F(PowerFsTest, PlainlyCreatedDirectoriesVanishWithTheirFiles) {
  Mount();
  std::filesystem::create_directories(M("data/raft"));
  Write(M("data/raft/metadata1"), "term", /*sync=*/true);
  SyncPath(M("data/raft"));
  Cycle();
  EXPECT_FALSE(std::filesystem::exists(M("data")));
}

TEST_F(PowerFsTest, AnExistingUnsyncedDirectoryIsMadeDurable) {
  Mount();
  std::filesystem::create_directories(M("data"));  // by a tool, never synced
  ASSERT_TRUE(dedup::CreateDirectoriesDurably(M("data")).ok());
  Write(M("data/CURRENT"), "MANIFEST-000001", /*sync=*/true);
  SyncPath(M("data"));
  Cycle();
  EXPECT_EQ(ReadFile(M("data/CURRENT")), "MANIFEST-000001");
}

TEST_F(PowerFsTest, CreatingDirectoriesOverAFileFails) {
  Mount();
  Write(M("file"), "x", /*sync=*/false);
  EXPECT_FALSE(dedup::CreateDirectoriesDurably(M("file")).ok());
  EXPECT_FALSE(dedup::CreateDirectoriesDurably(M("file/sub")).ok());
}

TEST_F(PowerFsTest, AReplacedFileIsDurableAndNeverPartial) {
  Mount();
  ASSERT_TRUE(dedup::ReplaceFileDurably(M("marker"), "17\n").ok());
  Cycle();
  EXPECT_EQ(ReadFile(M("marker")), "17\n");
  ASSERT_TRUE(dedup::ReplaceFileDurably(M("marker"), "42\n").ok());
  Cycle();
  EXPECT_EQ(ReadFile(M("marker")), "42\n");
  EXPECT_FALSE(std::filesystem::exists(M("marker.tmp")));
}

TEST_F(PowerFsTest, ACreatedFileIsDurableAndNeverReplaced) {
  Mount();
  ASSERT_TRUE(dedup::CreateFileDurably(M("key"), "first", 0600).ok());
  Cycle();
  EXPECT_EQ(ReadFile(M("key")), "first");
  ASSERT_TRUE(dedup::CreateFileDurably(M("key"), "second", 0600).ok());
  EXPECT_EQ(ReadFile(M("key")), "first");
  EXPECT_FALSE(std::filesystem::exists(M("key.tmp")));
}

}  // namespace
