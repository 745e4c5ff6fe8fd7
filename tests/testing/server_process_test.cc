// Tests of the harness itself, against fake_dedupd (see fake_dedupd.cc).
#include "tests/testing/server_process.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace dedup::testing {
namespace {

class ServerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("DEDUP_SERVER_BINARY", FAKE_DEDUPD, 1); }
};

TEST_F(ServerProcessTest, StartsReadsTheReadyFileAndStopsCleanly) {
  auto started = ServerProcess::Start({"--durability=none"});
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  EXPECT_EQ(server.port(), 45678);
  EXPECT_EQ(server.address(), "127.0.0.1:45678");
  EXPECT_EQ(server.metrics_port(), 45679);
  EXPECT_EQ(server.ready().pid, server.pid());
  EXPECT_EQ(server.ready().mode, "single");
  EXPECT_EQ(server.exit_code(), -1);
  const std::string out = server.captured_stderr();
  EXPECT_TRUE(absl::StrContains(out, "arg --address=127.0.0.1:0")) << out;
  EXPECT_TRUE(absl::StrContains(out, "arg --data_dir=" + server.data_dir()));
  EXPECT_TRUE(absl::StrContains(out, "arg --durability=none"));
  EXPECT_TRUE(absl::StrContains(out, "to stdout"));
  const std::string dir = server.data_dir();
  EXPECT_TRUE(std::filesystem::is_directory(dir));

  EXPECT_TRUE(server.Stop().ok());
  EXPECT_EQ(server.exit_code(), 0);
  EXPECT_TRUE(absl::StrContains(server.captured_stderr(), "signal 15"));
  EXPECT_TRUE(server.Stop().ok()) << "stopping twice only reports";
  started->reset();
  EXPECT_FALSE(std::filesystem::exists(dir)) << "owned temp dir not removed";
}

// A test's own --ready_file is the one read; a file an earlier server left
// there (another pid, another port) is not taken for this one's.
TEST_F(ServerProcessTest, WaitsForANewReadyFileAtAGivenPath) {
  auto dir = MakeTempDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = *dir + "/ready.json";
  {
    std::FILE* stale = std::fopen(path.c_str(), "w");
    ASSERT_NE(stale, nullptr);
    std::fputs("{\"pid\":1,\"address\":\"127.0.0.1:1\"}\n", stale);
    std::fclose(stale);
  }
  auto started = ServerProcess::Start(
      {"--ready_file=" + path, "--fake_ready_delay_ms=300"});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ((*started)->address(), "127.0.0.1:45678");
  EXPECT_TRUE(std::filesystem::exists(path));
  started->reset();
  std::filesystem::remove_all(*dir);
}

TEST_F(ServerProcessTest, KillReportsTheSignalAndStopThenFails) {
  auto started = ServerProcess::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  (*started)->Kill();
  EXPECT_EQ((*started)->exit_code(), 128 + SIGKILL);
  EXPECT_FALSE((*started)->Stop().ok());
}

TEST_F(ServerProcessTest, WaitForExitAfterAnotherSignalKeepsAGivenDir) {
  auto dir = MakeTempDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto started = ServerProcess::Start({}, *dir);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_FALSE((*started)->WaitForExit(std::chrono::milliseconds(50)));
  ASSERT_EQ(kill((*started)->pid(), SIGINT), 0);
  EXPECT_TRUE((*started)->WaitForExit(std::chrono::seconds(10)));
  EXPECT_EQ((*started)->exit_code(), 0);
  started->reset();
  EXPECT_TRUE(std::filesystem::is_directory(*dir)) << "a given dir was removed";
  std::filesystem::remove_all(*dir);
}

TEST_F(ServerProcessTest, StartFailsWithTheExitCodeAndOutput) {
  auto started = ServerProcess::Start({"--fake_exit=3"});
  ASSERT_FALSE(started.ok());
  EXPECT_TRUE(absl::StrContains(started.status().message(), "code 3"))
      << started.status();
  EXPECT_TRUE(absl::StrContains(started.status().message(), "locked"))
      << started.status();
}

TEST_F(ServerProcessTest, RunProcessCapturesExitAndOutputAndTimesOut) {
  auto done = RunProcess(ServerBinary(), {"--fake_exit=3"});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_FALSE(done->timed_out);
  EXPECT_TRUE(absl::StrContains(done->output, "data dir is locked"));

  const auto start = std::chrono::steady_clock::now();
  auto hung = RunProcess(ServerBinary(), {"--fake_hang"},
                         std::chrono::milliseconds(200));
  ASSERT_TRUE(hung.ok()) << hung.status();
  EXPECT_TRUE(hung->timed_out);
  EXPECT_EQ(hung->exit_code, 128 + SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ServerProcessTest, MissingBinaryIsAnError) {
  setenv("DEDUP_SERVER_BINARY", "/nonexistent/dedupd", 1);
  EXPECT_FALSE(ServerProcess::Start().ok());
  EXPECT_FALSE(RunProcess(ServerBinary(), {}).ok());
}

}  // namespace
}  // namespace dedup::testing
