// Running out of file descriptors stops writes, not the server, and not
// until a restart: once descriptors are back, writes resume by themselves
// and nothing acknowledged is lost. (Before, a flush that failed with
// EMFILE left every later call failing with "Seen error. Skip writing
// buffer." for good.) The test lowers the running server's descriptor
// limit with prlimit(2) and asks for a flush, which must open new files.
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Sets the soft descriptor limit of process `pid`; returns the old limits.
struct rlimit SetSoftFdLimit(int pid, rlim_t soft) {
  struct rlimit old {};
  struct rlimit now {};
  EXPECT_EQ(prlimit(pid, RLIMIT_NOFILE, nullptr, &old), 0);
  now = old;
  now.rlim_cur = soft;
  EXPECT_EQ(prlimit(pid, RLIMIT_NOFILE, &now, nullptr), 0);
  return old;
}

TEST(FdExhaustionTest, WritesStopAndResumeOnceDescriptorsAreBack) {
  // The sanitizers' runtime needs descriptors of its own in the starved
  // server (UBSan's vptr check tests memory through a pipe, and reports it
  // "invalid" when pipe() fails with EMFILE; the symbolizer needs a socket
  // pair): under them this would test the sanitizer.
  if (UnderSanitizer()) GTEST_SKIP() << "starves the sanitizer runtime too";
  const std::vector<std::string> flags = {
      "--durability=sync", "--write_retry_interval_ms=200",
      "--metrics_address=127.0.0.1:0", "--event_log=off"};
  DEDUP_START_SERVER(server, flags);
  ASSERT_GT(server->pid(), 0);
  TestClient c(server->address());
  std::vector<std::pair<std::string, uint64_t>> acked;
  auto write = [&](const std::string& key) -> grpc::Status {
    v1::BeginResponse began;
    grpc::Status s = c.BeginStatus(c.BeginReq(key, "w"), &began);
    if (!s.ok()) return s;
    v1::CompleteRequest req;
    req.set_namespace_(c.ns());
    req.set_key(key);
    req.set_fence(began.fence());
    req.set_outcome(v1::SUCCESS);
    req.set_result("result-" + key);
    v1::CompleteResponse done;
    s = c.CompleteStatus(req, &done);
    if (s.ok() && done.status() == v1::CompleteResponse::OK) {
      acked.emplace_back(key, began.fence());
    }
    return s;
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(write(absl::StrCat("a-", i)).ok());

  // The admin channel is opened before the limit drops.
  auto admin = v1::Admin::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::StatsResponse stats;
    ASSERT_TRUE(admin->Stats(&ctx, v1::StatsRequest(), &stats).ok());
  }
  const struct rlimit old =
      SetSoftFdLimit(server->pid(), OpenDescriptors(server->pid()));
  // A flush needs new files (a table, a WAL, the MANIFEST's edits): it fails.
  for (int i = 0; i < 50; ++i) (void)write(absl::StrCat("b-", i));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::CompactResponse compacted;
    const grpc::Status s =
        admin->Compact(&ctx, v1::CompactRequest(), &compacted);
    EXPECT_FALSE(s.ok()) << "a flush opened files past the limit";
  }
  // Writes are refused at once with the reason; the server stays up.
  const Clock::time_point refused_at = Clock::now();
  const grpc::Status refused = write("refused");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_TRUE(
      absl::StrContains(refused.error_message(), "storage cannot write"))
      << refused.error_message();
  EXPECT_LT(Clock::now() - refused_at, std::chrono::seconds(1));

  // Descriptors back: writes come back by themselves, without a restart.
  SetSoftFdLimit(server->pid(), old.rlim_cur);
  const Clock::time_point back_at = Clock::now();
  grpc::Status resumed = write("c-0");
  while (!resumed.ok() && Clock::now() - back_at < std::chrono::seconds(10)) {
    SleepMs(50);
    resumed = write("c-0");
  }
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  std::cerr << "writes resumed "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   Clock::now() - back_at)
                   .count()
            << " ms after descriptors were back\n";
  EXPECT_GE(
      ScrapeSample(server->metrics_port(), "dedup_storage_write_resumes_total")
          .value_or(-1),
      1);

  // Every acknowledged Complete replays, before and after a clean restart.
  auto expect_acked = [&](TestClient& client) {
    int missing = 0;
    for (const auto& [key, fence] : acked) {
      const v1::BeginResponse replay = client.Begin(key, "someone-else");
      if (replay.status() != v1::BeginResponse::DUPLICATE ||
          replay.fence() != fence || replay.result() != "result-" + key) {
        if (++missing <= 5) ADD_FAILURE() << key << " lost";
      }
    }
    EXPECT_EQ(missing, 0) << "of " << acked.size() << " acknowledged";
  };
  expect_acked(c);
  ASSERT_TRUE(server->Stop().ok());
  absl::StatusOr<std::unique_ptr<ServerProcess>> again =
      ServerProcess::Start(flags, server->data_dir());
  ASSERT_TRUE(again.ok()) << again.status();
  TestClient after_restart((*again)->address());
  expect_acked(after_restart);
}

}  // namespace
}  // namespace dedup::testing
