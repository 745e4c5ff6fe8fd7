// powerfs under test: each case mounts it on a fresh backing directory,
// makes changes with and without the syncs that make them durable, cuts the
// power, mounts again and checks exactly what survived.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace {

constexpr long kFuseMagic = 0x65735546;

std::optional<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

void SyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(fsync(fd), 0) << path << ": " << strerror(errno);
  close(fd);
}

// Writes `data` at `offset` of `path` (created if missing), fsyncing the file
// when `sync`.
void Write(const std::string& path, const std::string& data, bool sync,
           off_t offset = 0, int extra_flags = 0) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | extra_flags, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), offset),
            static_cast<ssize_t>(data.size()));
  if (sync) {
    ASSERT_EQ(fsync(fd), 0);
  }
  close(fd);
}

class PowerFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    char tmpl[] = "/tmp/powerfs_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    backing_ = base_ + "/backing";
    mount_ = base_ + "/mnt";
    ASSERT_EQ(mkdir(backing_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(mount_.c_str(), 0755), 0);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!base_.empty()) {
      umount2(mount_.c_str(), MNT_DETACH);
      std::error_code error;
      std::filesystem::remove_all(base_, error);
    }
  }

  // Mounts powerfs; returns when the mount answers.
  void Mount(bool lying_sync = false) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      const std::string log = base_ + "/powerfs.log";
      execl(POWERFS_BINARY, "powerfs", "--backing", backing_.c_str(), "--mount",
            mount_.c_str(), "--log", log.c_str(),
            lying_sync ? "--lying_sync" : nullptr, nullptr);
      _exit(127);
    }
    close(out[1]);
    stdout_ = out[0];
    for (int i = 0; i < 1000; ++i) {
      struct statfs st;
      if (statfs(mount_.c_str(), &st) == 0 && st.f_type == kFuseMagic) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "powerfs did not mount " << mount_;
  }

  // Cuts the power; returns powerfs's report line.
  std::string PowerOff() {
    EXPECT_EQ(kill(pid_, SIGUSR1), 0);
    std::string report;
    char buf[4096];
    ssize_t n;
    while ((n = read(stdout_, buf, sizeof(buf))) > 0) report.append(buf, n);
    close(stdout_);
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "status " << status << "; report " << report;
    umount2(mount_.c_str(), MNT_DETACH);
    return report;
  }

  void Unmount() {
    ASSERT_EQ(kill(pid_, SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    close(stdout_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  // Cuts the power and mounts again.
  std::string Cycle() {
    std::string report = PowerOff();
    Mount();
    return report;
  }

  std::string M(const std::string& name) const { return mount_ + "/" + name; }

  std::string base_, backing_, mount_;
  pid_t pid_ = -1;
  int stdout_ = -1;
};

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
