// powerfs under test: each case mounts it on a fresh backing directory,
// makes changes with and without the syncs that make them durable, cuts the
// power, mounts again and checks exactly what survived.
#include "powerfs_fixture.h"

namespace {

using powerfs_testing::PowerFsTest;
using powerfs_testing::ReadFile;
using powerfs_testing::SyncPath;
using powerfs_testing::Write;

TEST_F(PowerFsTest, KeepsSyncedDataAndLosesTheRest) {
  Mount();
  Write(M("f"), std::string(100, 'a'), /*sync=*/true);
  SyncPath(mount_);
  Write(M("f"), std::string(50, 'b'), /*sync=*/false, 100);  // growth
  Write(M("f"), std::string(10, 'c'), /*sync=*/false, 0);    // overwrite
  ASSERT_EQ(ReadFile(M("f"))->size(), 150u);
  const std::string report = Cycle();
  EXPECT_EQ(ReadFile(M("f")), std::string(100, 'a'));
  EXPECT_NE(report.find("\"bytes_lost\": 60"), std::string::npos) << report;
  EXPECT_NE(report.find("\"/f\""), std::string::npos) << report;
}

TEST_F(PowerFsTest, FdatasyncAndODsyncMakeDataDurable) {
  Mount();
  Write(M("f"), "", /*sync=*/false);
  Write(M("g"), "", /*sync=*/false);
  SyncPath(mount_);
  const int fd = open(M("f").c_str(), O_WRONLY);
  ASSERT_EQ(pwrite(fd, "synced", 6, 0), 6);
  ASSERT_EQ(fdatasync(fd), 0);
  close(fd);
  Write(M("g"), "dsync", /*sync=*/false, 0, O_DSYNC);
  Cycle();
  EXPECT_EQ(ReadFile(M("f")), "synced");
  EXPECT_EQ(ReadFile(M("g")), "dsync");
}

TEST_F(PowerFsTest, ANewNameNeedsItsDirectorySynced) {
  Mount();
  Write(M("lost"), "data", /*sync=*/true);  // the file, not its name
  Write(M("kept"), "data", /*sync=*/true);
  SyncPath(mount_);
  Write(M("late"), "data", /*sync=*/true);
  ASSERT_EQ(mkdir(M("d").c_str(), 0755), 0);
  const std::string report = Cycle();
  EXPECT_EQ(ReadFile(M("kept")), "data");
  EXPECT_FALSE(ReadFile(M("late")).has_value());
  EXPECT_FALSE(std::filesystem::exists(M("d")));
  EXPECT_NE(report.find("\"names_removed\": 2"), std::string::npos) << report;
}

TEST_F(PowerFsTest, ADirectorySyncDoesNotSyncItsFiles) {
  Mount();
  Write(M("f"), "data", /*sync=*/false);
  SyncPath(mount_);
  Cycle();
  EXPECT_EQ(ReadFile(M("f")), "");
}

TEST_F(PowerFsTest, AnUnsyncedUnlinkComesBackWithItsData) {
  Mount();
  Write(M("f"), "durable", /*sync=*/true);
  Write(M("g"), "durable", /*sync=*/true);
  SyncPath(mount_);
  ASSERT_EQ(unlink(M("f").c_str()), 0);
  ASSERT_EQ(unlink(M("g").c_str()), 0);
  SyncPath(mount_);  // g's removal is durable, f's too
  Write(M("h"), "durable", /*sync=*/true);
  SyncPath(mount_);
  ASSERT_EQ(unlink(M("h").c_str()), 0);
  Cycle();
  EXPECT_FALSE(ReadFile(M("f")).has_value());
  EXPECT_FALSE(ReadFile(M("g")).has_value());
  EXPECT_EQ(ReadFile(M("h")), "durable");
}

TEST_F(PowerFsTest, RenameOverAFileIsAllOrNothing) {
  Mount();
  Write(M("CURRENT"), "old", /*sync=*/true);
  SyncPath(mount_);
  Write(M("tmp"), "new", /*sync=*/true);
  ASSERT_EQ(rename(M("tmp").c_str(), M("CURRENT").c_str()), 0);
  Cycle();
  EXPECT_EQ(ReadFile(M("CURRENT")), "old");
  EXPECT_FALSE(ReadFile(M("tmp")).has_value());

  Write(M("tmp"), "new", /*sync=*/true);
  ASSERT_EQ(rename(M("tmp").c_str(), M("CURRENT").c_str()), 0);
  SyncPath(mount_);
  Cycle();
  EXPECT_EQ(ReadFile(M("CURRENT")), "new");
  EXPECT_FALSE(ReadFile(M("tmp")).has_value());
}

TEST_F(PowerFsTest, ARenameAcrossDirectoriesIsCommittedBySyncingEither) {
  Mount();
  ASSERT_EQ(mkdir(M("a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(M("b").c_str(), 0755), 0);
  Write(M("a/x"), "x", /*sync=*/true);
  Write(M("a/y"), "y", /*sync=*/true);
  SyncPath(M("a"));
  SyncPath(mount_);
  ASSERT_EQ(rename(M("a/x").c_str(), M("b/x").c_str()), 0);
  ASSERT_EQ(rename(M("a/y").c_str(), M("b/y").c_str()), 0);
  ASSERT_EQ(rename(M("b/x").c_str(), M("b/x2").c_str()), 0);
  SyncPath(M("a"));  // commits a/y -> b/y and a/x -> b/x, not b/x -> b/x2
  Cycle();
  EXPECT_FALSE(ReadFile(M("a/x")).has_value());
  EXPECT_FALSE(ReadFile(M("a/y")).has_value());
  EXPECT_EQ(ReadFile(M("b/x")), "x");
  EXPECT_FALSE(ReadFile(M("b/x2")).has_value());
  EXPECT_EQ(ReadFile(M("b/y")), "y");
}

TEST_F(PowerFsTest, ARenamedDirectoryGoesBackWithItsFiles) {
  Mount();
  ASSERT_EQ(mkdir(M("d").c_str(), 0755), 0);
  Write(M("d/f"), "f", /*sync=*/true);
  SyncPath(M("d"));
  SyncPath(mount_);
  ASSERT_EQ(rename(M("d").c_str(), M("e").c_str()), 0);
  ASSERT_EQ(unlink(M("e/f").c_str()), 0);
  ASSERT_EQ(rmdir(M("e").c_str()), 0);
  const std::string report = Cycle();
  EXPECT_EQ(ReadFile(M("d/f")), "f") << report;
  EXPECT_FALSE(std::filesystem::exists(M("e")));
}

TEST_F(PowerFsTest, HardLinksAreNamesLikeAnyOther) {
  Mount();
  ASSERT_EQ(mkdir(M("checkpoint").c_str(), 0755), 0);
  Write(M("000010.sst"), "table", /*sync=*/true);
  SyncPath(mount_);
  ASSERT_EQ(link(M("000010.sst").c_str(), M("checkpoint/000010.sst").c_str()),
            0);
  ASSERT_EQ(link(M("000010.sst").c_str(), M("unsynced.sst").c_str()), 0);
  SyncPath(M("checkpoint"));
  ASSERT_EQ(unlink(M("000010.sst").c_str()), 0);
  SyncPath(mount_);  // the unlink and the second link are durable now
  ASSERT_EQ(unlink(M("unsynced.sst").c_str()), 0);
  Cycle();
  EXPECT_FALSE(ReadFile(M("000010.sst")).has_value());
  EXPECT_EQ(ReadFile(M("checkpoint/000010.sst")), "table");
  EXPECT_EQ(ReadFile(M("unsynced.sst")), "table");
}

TEST_F(PowerFsTest, TruncationAndPreallocationGoBack) {
  Mount();
  Write(M("segment"), std::string(4096, 's'), /*sync=*/true);
  SyncPath(mount_);
  ASSERT_EQ(truncate(M("segment").c_str(), 100), 0);
  Write(M("segment"), "xyz", /*sync=*/false, 50);
  const int fd = open(M("segment").c_str(), O_RDWR);
  ASSERT_EQ(fallocate(fd, 0, 0, 1 << 20), 0);
  close(fd);
  Cycle();
  EXPECT_EQ(ReadFile(M("segment")), std::string(4096, 's'));
}

TEST_F(PowerFsTest, ANewDirectoryNeedsItsParentSynced) {
  Mount();
  ASSERT_EQ(mkdir(M("raft").c_str(), 0755), 0);
  Write(M("raft/metadata1"), "term", /*sync=*/true);
  SyncPath(M("raft"));
  Cycle();
  EXPECT_FALSE(std::filesystem::exists(M("raft")));

  ASSERT_EQ(mkdir(M("raft").c_str(), 0755), 0);
  Write(M("raft/metadata1"), "term", /*sync=*/true);
  SyncPath(M("raft"));
  SyncPath(mount_);
  Cycle();
  EXPECT_EQ(ReadFile(M("raft/metadata1")), "term");
}

TEST_F(PowerFsTest, AfterThePowerCutNothingAnswers) {
  Mount();
  Write(M("f"), "data", /*sync=*/true);
  const int fd = open(M("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  PowerOff();
  errno = 0;
  EXPECT_EQ(pwrite(fd, "x", 1, 0), -1);
  EXPECT_TRUE(errno == EIO || errno == ENOTCONN) << strerror(errno);
  close(fd);
  EXPECT_FALSE(std::filesystem::exists(backing_ + "/.powerfs/k1"));
}

TEST_F(PowerFsTest, ACleanUnmountLosesNothing) {
  Mount();
  Write(M("f"), "unsynced", /*sync=*/false);
  Unmount();
  Mount();
  EXPECT_EQ(ReadFile(M("f")), "unsynced");
  EXPECT_FALSE(std::filesystem::exists(M(".powerfs")));
}

TEST_F(PowerFsTest, ALyingDiskLosesEvenSyncedWrites) {
  Mount(/*lying_sync=*/true);
  Write(M("f"), "synced", /*sync=*/true);
  SyncPath(mount_);
  Cycle();
  EXPECT_FALSE(ReadFile(M("f")).has_value());
}

}  // namespace
