// dedup::Client and RunOnce against the real dedupd.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gtest/gtest.h"
#include "tests/client/shared_client.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

constexpr char kNs[] = "client-itest";

class ClientIntegrationTest : public SharedClientTest<ClientIntegrationTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

TEST_F(ClientIntegrationTest, BeginCompleteThenBeginIsDuplicate) {
  BeginOptions options;
  options.owner = "owner-a";
  absl::StatusOr<v1::BeginResponse> first =
      client_->Begin(kNs, Key(), "args", options);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->status(), v1::BeginResponse::STARTED);
  EXPECT_GT(first->fence(), 0u);

  absl::StatusOr<v1::CompleteResponse> complete =
      client_->Complete(kNs, Key(), first->fence(), v1::SUCCESS, "sent #1");
  ASSERT_TRUE(complete.ok()) << complete.status();
  EXPECT_EQ(complete->status(), v1::CompleteResponse::OK);

  options.owner = "owner-b";
  absl::StatusOr<v1::BeginResponse> second =
      client_->Begin(kNs, Key(), "args", options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->status(), v1::BeginResponse::DUPLICATE);
  EXPECT_EQ(second->fence(), first->fence());
  EXPECT_EQ(second->outcome(), v1::SUCCESS);
  EXPECT_EQ(second->result(), "sent #1");

  absl::StatusOr<v1::GetResponse> got = client_->Get(kNs, Key());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->found());
  EXPECT_EQ(got->record().state(), v1::COMPLETED);
}

TEST_F(ClientIntegrationTest, InvalidArgumentKeepsCodeAndMessage) {
  absl::StatusOr<v1::BeginResponse> begin = client_->Begin(kNs, "", "");
  EXPECT_EQ(begin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(begin.status().message().empty());
}

TEST_F(ClientIntegrationTest, RunOnceRunsFnExactlyOnceAcrossRacingThreads) {
  constexpr int kThreads = 8;
  std::atomic<int> executions{0};
  absl::Barrier barrier(kThreads);
  std::vector<absl::StatusOr<RunResult>> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      barrier.Block();
      results[i] = RunOnce(*client_, kNs, Key(), "args", [&](const Claim&) {
        ++executions;
        // Long enough that the others arrive while it runs.
        absl::SleepFor(absl::Milliseconds(200));
        return ExecResult::Success("charged 42");
      });
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(executions.load(), 1);
  int originals = 0;
  for (const absl::StatusOr<RunResult>& run : results) {
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->outcome, v1::SUCCESS);
    EXPECT_EQ(run->result, "charged 42");
    EXPECT_EQ(run->fence, results[0]->fence);
    if (!run->duplicate) ++originals;
  }
  EXPECT_EQ(originals, 1);
}

TEST_F(ClientIntegrationTest, RunOncePermanentErrorIsReplayed) {
  int calls = 0;
  auto fn = [&](const Claim&) {
    ++calls;
    return ExecResult::PermanentError("card declined");
  };
  absl::StatusOr<RunResult> first = RunOnce(*client_, kNs, Key(), "args", fn);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, v1::ERROR);
  EXPECT_EQ(first->result, "card declined");
  EXPECT_FALSE(first->duplicate);

  absl::StatusOr<RunResult> second = RunOnce(*client_, kNs, Key(), "args", fn);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(second->duplicate);
  EXPECT_EQ(second->outcome, v1::ERROR);
  EXPECT_EQ(second->result, "card declined");
  EXPECT_EQ(second->fence, first->fence);
}

TEST_F(ClientIntegrationTest, RunOnceRetryableReleasesSoNextRunExecutes) {
  absl::StatusOr<RunResult> first =
      RunOnce(*client_, kNs, Key(), "args", [](const Claim&) {
        return ExecResult::Retryable(absl::UnavailableError("smtp down"));
      });
  EXPECT_EQ(first.status(), absl::UnavailableError("smtp down"));

  absl::StatusOr<v1::GetResponse> got = client_->Get(kNs, Key());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->found()) << "the claim should have been released";

  int calls = 0;
  absl::StatusOr<RunResult> second =
      RunOnce(*client_, kNs, Key(), "args", [&](const Claim&) {
        ++calls;
        return ExecResult::Success("sent");
      });
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(second->duplicate);
  EXPECT_EQ(second->result, "sent");
}

TEST_F(ClientIntegrationTest, RunOnceConflictOnOtherArgs) {
  ASSERT_TRUE(RunOnce(*client_, kNs, Key(), "args-1", [](const Claim&) {
                return ExecResult::Success("x");
              }).ok());
  bool called = false;
  absl::StatusOr<RunResult> run =
      RunOnce(*client_, kNs, Key(), "args-2", [&](const Claim&) {
        called = true;
        return ExecResult::Success("y");
      });
  EXPECT_FALSE(called);
  EXPECT_TRUE(IsConflict(run.status())) << run.status();
}

TEST_F(ClientIntegrationTest, RunOnceReportsStaleFenceAfterTakeover) {
  RunOptions options;
  options.lease_ms = 100;  // The server's minimum.
  options.renew = false;   // let the lease lapse
  absl::StatusOr<RunResult> run = RunOnce(
      *client_, kNs, Key(), "args",
      [&](const Claim& claim) {
        // Outlive the lease, then let someone else take the key over.
        absl::SleepFor(absl::Milliseconds(300));
        BeginOptions thief;
        thief.owner = "thief";
        absl::StatusOr<v1::BeginResponse> taken =
            client_->Begin(kNs, Key(), "args", thief);
        EXPECT_TRUE(taken.ok()) << taken.status();
        if (taken.ok()) {
          EXPECT_EQ(taken->status(), v1::BeginResponse::STARTED);
          EXPECT_TRUE(taken->takeover());
          EXPECT_GT(taken->fence(), claim.fence);
        }
        return ExecResult::Success("too late");
      },
      options);
  EXPECT_TRUE(IsStaleFence(run.status())) << run.status();
}

}  // namespace
}  // namespace dedup
