// A GoogleTest fixture that mounts powerfs (tests/powerfs/README.md) on a
// fresh backing directory, cuts its power and mounts it again, plus small
// file helpers. Tests skip without root or /dev/fuse. POWERFS_BINARY is the
// powerfs executable (a compile definition).
#ifndef DEDUP_TESTS_POWERFS_POWERFS_FIXTURE_H_
#define DEDUP_TESTS_POWERFS_POWERFS_FIXTURE_H_

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

namespace powerfs_testing {

inline constexpr long kFuseMagic = 0x65735546;

inline std::optional<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

inline void SyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(fsync(fd), 0) << path << ": " << strerror(errno);
  close(fd);
}

// Writes `data` at `offset` of `path` (created if missing), fsyncing the file
// when `sync`.
inline void Write(const std::string& path, const std::string& data, bool sync,
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

}  // namespace powerfs_testing

#endif  // DEDUP_TESTS_POWERFS_POWERFS_FIXTURE_H_
