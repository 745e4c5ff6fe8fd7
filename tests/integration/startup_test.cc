// Process-level behaviour of dedupd: refusing unusable or locked data dirs
// (exit 3), bad flags (exit 2), and clean exits on SIGTERM and SIGINT.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;

// dedupd run to its exit, as a short-lived process.
ProcessResult RunDedupd(const std::vector<std::string>& flags) {
  absl::StatusOr<ProcessResult> r = RunProcess(ServerBinary(), flags);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ProcessResult{};
}

TEST(StartupTest, SecondServerOnTheSameDataDirExitsWith3) {
  DEDUP_START_SERVER(first);
  TestClient c(first->address());
  const BeginResponse r = c.Begin("before", "a");
  ASSERT_EQ(c.Complete("before", r.fence(), "kept").status(),
            CompleteResponse::OK);

  const ProcessResult second =
      RunDedupd({"--address=127.0.0.1:0", "--data_dir=" + first->data_dir()});
  EXPECT_FALSE(second.timed_out) << "the second dedupd kept running";
  EXPECT_EQ(second.exit_code, 3) << second.output;
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(second.output), "lock"))
      << "the message should say the dir is locked; got:\n"
      << second.output;

  // The first server is unharmed.
  EXPECT_EQ(c.Begin("before", "b").result(), "kept");
  c.Disconnect();
  const absl::Status stopped = first->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(StartupTest, DataDirThatIsARegularFileExitsWith3) {
  absl::StatusOr<std::string> dir = MakeTempDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string file = *dir + "/not-a-dir";
  std::ofstream(file) << "x";

  const ProcessResult r =
      RunDedupd({"--address=127.0.0.1:0", "--data_dir=" + file});
  EXPECT_FALSE(r.timed_out) << "dedupd kept running on a file as data dir";
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, file) ||
              absl::StrContains(r.output, "data_dir"))
      << "the message should name the data dir; got:\n"
      << r.output;
  std::remove(file.c_str());
  rmdir(dir->c_str());
}

TEST(StartupTest, BadFlagsExitWith2) {
  absl::StatusOr<std::string> dir = MakeTempDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string data_dir = "--data_dir=" + *dir;
  const std::vector<std::vector<std::string>> cases = {
      {"--durability=sometimes"},          {"--no_such_flag=1"},
      {"--default_lease_ms=not-a-number"}, {"--serving_thread_nice=20"},
      {"--serving_thread_nice=-1"},
  };
  for (const std::vector<std::string>& extra : cases) {
    std::vector<std::string> flags = {"--address=127.0.0.1:0", data_dir};
    flags.insert(flags.end(), extra.begin(), extra.end());
    const ProcessResult r = RunDedupd(flags);
    EXPECT_FALSE(r.timed_out) << extra[0];
    EXPECT_EQ(r.exit_code, 2) << extra[0] << ":\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << extra[0];
  }
  std::error_code ignored;
  std::filesystem::remove_all(*dir, ignored);
}

// --help is generated from common/exit_codes.h: every code there, with its
// meaning, on a line of its own.
TEST(StartupTest, HelpListsEveryExitCode) {
  const ProcessResult r = RunDedupd({"--help"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(absl::StrContains(r.output, "Exit codes:")) << r.output;
  for (const ExitCodeInfo& info : kExitCodes) {
    EXPECT_TRUE(absl::StrContains(
        r.output, absl::StrCat("\n  ", info.code, " ", info.meaning, "\n")))
        << "exit code " << info.code << " (" << info.name
        << ") missing from --help:\n"
        << r.output;
  }
}

TEST(StartupTest, SigintExitsZeroAndKeepsData) {
  DEDUP_START_SERVER(first);
  {
    TestClient c(first->address());
    const BeginResponse r = c.Begin("k", "a");
    ASSERT_EQ(c.Complete("k", r.fence(), "kept").status(),
              CompleteResponse::OK);
  }
  ASSERT_EQ(kill(first->pid(), SIGINT), 0);
  ASSERT_TRUE(first->WaitForExit(std::chrono::seconds(30)))
      << "dedupd did not exit on SIGINT";
  EXPECT_EQ(first->exit_code(), 0) << first->captured_stderr();

  DEDUP_START_SERVER(second, {}, first->data_dir());
  TestClient c(second->address());
  EXPECT_EQ(c.Begin("k", "b").result(), "kept");
  c.Disconnect();
  const absl::Status stopped = second->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// SIGTERM must not leave a Begin parked in wait_ms hanging until its wait
// ends, and must still exit 0.
TEST(StartupTest, SigtermAnswersParkedWaitersAndExitsZero) {
  DEDUP_START_SERVER(server);
  TestClient c(server->address());
  const BeginResponse owner = c.Begin("busy", "owner");
  ASSERT_EQ(owner.status(), BeginResponse::STARTED);
  c.Disconnect();

  using Clock = std::chrono::steady_clock;
  std::future<std::pair<grpc::Status, Clock::time_point>> waiter =
      std::async(std::launch::async, [address = server->address()] {
        TestClient w(address);
        v1::BeginRequest req = w.BeginReq("busy", "waiter");
        req.set_wait_ms(30000);
        v1::BeginResponse resp;
        grpc::Status s = w.BeginStatus(req, &resp);
        if (s.ok() && resp.status() != BeginResponse::IN_USE) {
          s = grpc::Status(
              grpc::StatusCode::INTERNAL,
              "answered " + BeginResponse::Status_Name(resp.status()));
        }
        return std::make_pair(s, Clock::now());
      });
  SleepMs(300);  // Let the waiter park.
  const Clock::time_point sigterm = Clock::now();
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
  const auto [status, answered] = waiter.get();
  // Either an answer (IN_USE) or "the server is going away" (never
  // CANCELLED, which clients do not retry).
  EXPECT_TRUE(status.ok() ||
              status.error_code() == grpc::StatusCode::UNAVAILABLE)
      << status.error_code() << ": " << status.error_message();
  EXPECT_LT(
      std::chrono::duration_cast<std::chrono::milliseconds>(answered - sigterm)
          .count(),
      3000)
      << "the parked waiter was held through the drain";
}

// comm -> nice value of each thread of process `pid` (/proc/PID/task).
std::vector<std::pair<std::string, int>> ThreadNices(pid_t pid) {
  std::vector<std::pair<std::string, int>> out;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm_in(task.path() / "comm");
    std::ifstream stat_in(task.path() / "stat");
    std::string comm, stat;
    std::getline(comm_in, comm);
    std::getline(stat_in, stat);
    // Fields after "(comm) ": state is field 3, nice field 19.
    const size_t close = stat.rfind(')');
    if (comm.empty() || close == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
    if (fields.size() < 17) continue;
    out.emplace_back(comm, std::stoi(fields[16]));
  }
  return out;
}

// Threads that served calls run at --serving_thread_nice (default 10), so
// that a node short of CPU runs its storage and consensus threads first;
// the others keep the process's priority. 0 leaves every thread alone.
TEST(StartupTest, ThreadsServingCallsRunAtServingThreadNice) {
  for (const int nice : {10, 0}) {
    DEDUP_START_SERVER(server, {absl::StrCat("--serving_thread_nice=", nice)});
    if (server->pid() < 0) {
      GTEST_SKIP() << "a cluster: no single pid";
    }
    TestClient c(server->address());
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(c.Begin(TestKey(absl::StrCat(nice, "-", i)), "o").status(),
                BeginResponse::STARTED);
    }
    int lowered = 0;
    for (const auto& [comm, value] : ThreadNices(server->pid())) {
      if (value == nice && nice != 0) ++lowered;
      if (comm == "dedup-disk" || comm == "rocksdb:high") {
        EXPECT_EQ(value, 0) << comm << " was lowered too";
      }
      EXPECT_TRUE(value == 0 || value == nice) << comm << " at nice " << value;
    }
    if (nice != 0) {
      EXPECT_GE(lowered, 1) << "no thread serving calls lowered";
    }
    c.Disconnect();
    EXPECT_TRUE(server->Stop().ok());
  }
}

}  // namespace
}  // namespace dedup::testing
