// RunOnce's issue-16 behaviour against the real dedupd: leases that renew
// themselves, EXPIRED instead of a silent re-run, and checkpoints a takeover
// resumes from.
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gtest/gtest.h"
#include "tests/client/shared_client.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace run_once_features_test {
namespace {

constexpr char kNs[] = "run-once-features";

class RunOnceFeaturesTest : public SharedClientTest<RunOnceFeaturesTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

TEST_F(RunOnceFeaturesTest, ASideEffectThreeTimesItsLeaseIsNeverTakenOver) {
  RunOptions options;
  options.lease_ms = 300;
  std::atomic<bool> running{false};
  std::atomic<bool> done{false};
  std::set<std::string> seen;  // by the prober only
  std::thread prober([&] {
    while (!running.load()) absl::SleepFor(absl::Milliseconds(5));
    BeginOptions other;
    other.owner = "prober";
    while (!done.load()) {
      absl::StatusOr<v1::BeginResponse> r =
          client_->Begin(kNs, Key(), "args", other);
      if (r.ok() && !done.load()) {
        seen.insert(v1::BeginResponse::Status_Name(r->status()));
      }
      absl::SleepFor(absl::Milliseconds(40));
    }
  });
  absl::StatusOr<RunResult> run = RunOnce(
      *client_, kNs, Key(), "args",
      [&](const Claim& claim) {
        running = true;
        absl::SleepFor(absl::Milliseconds(900));
        EXPECT_FALSE(claim.lost());
        done = true;
        return ExecResult::Success("slow but sole");
      },
      options);
  done = true;
  prober.join();
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->duplicate);
  EXPECT_EQ(seen, std::set<std::string>{"IN_USE"});
  absl::StatusOr<v1::GetResponse> got = client_->Get(kNs, Key());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->record().attempts(), 1u);
  EXPECT_EQ(got->record().result(), "slow but sole");
}

TEST_F(RunOnceFeaturesTest, ALateRetryIsExpiredUnlessItAcceptsARerun) {
  RunOptions options;
  options.ttl_s = 1;
  absl::StatusOr<RunResult> first = RunOnce(
      *client_, kNs, Key(), "args",
      [](const Claim&) { return ExecResult::Success("once"); }, options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::SleepFor(absl::Milliseconds(1200));
  bool called = false;
  absl::StatusOr<RunResult> late = RunOnce(
      *client_, kNs, Key(), "args",
      [&](const Claim&) {
        called = true;
        return ExecResult::Success("twice");
      },
      options);
  EXPECT_FALSE(called);
  EXPECT_TRUE(IsExpired(late.status())) << late.status();
  EXPECT_FALSE(IsConflict(late.status()));
  EXPECT_NE(late.status().message().find("already ran"), std::string::npos)
      << late.status();

  options.accept_rerun = true;
  absl::StatusOr<RunResult> rerun = RunOnce(
      *client_, kNs, Key(), "args",
      [&](const Claim& claim) {
        called = true;
        EXPECT_TRUE(claim.rerun);
        EXPECT_EQ(claim.attempts, 2u);
        return ExecResult::Success("twice, on purpose");
      },
      options);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_TRUE(called);
  EXPECT_GT(rerun->fence, first->fence);
}

TEST_F(RunOnceFeaturesTest, ATakeoverResumesFromTheCheckpoint) {
  RunOptions slow;
  slow.lease_ms = 100;
  slow.renew = false;  // the first owner stalls and loses its lease
  std::optional<v1::CheckpointInfo> resumed_from;
  absl::Status late_checkpoint;
  absl::StatusOr<RunResult> first = RunOnce(
      *client_, kNs, Key(), "args",
      [&](const Claim& claim) {
        EXPECT_FALSE(claim.last_checkpoint.has_value());
        EXPECT_TRUE(claim.Checkpoint("charged", "ch_42").ok());
        absl::SleepFor(absl::Milliseconds(250));
        // Meanwhile another worker takes over and resumes.
        absl::StatusOr<RunResult> second =
            RunOnce(*client_, kNs, Key(), "args", [&](const Claim& takeover) {
              EXPECT_TRUE(takeover.takeover);
              resumed_from = takeover.last_checkpoint;
              return ExecResult::Success("shipped after charge ch_42");
            });
        EXPECT_TRUE(second.ok()) << second.status();
        // The stalled owner's progress is refused: its claim is lost.
        late_checkpoint = claim.Checkpoint("shipped", "");
        EXPECT_TRUE(claim.lost());
        return ExecResult::Success("too late");
      },
      slow);
  ASSERT_TRUE(resumed_from.has_value());
  EXPECT_EQ(resumed_from->step(), "charged");
  EXPECT_EQ(resumed_from->data(), "ch_42");
  EXPECT_TRUE(IsClaimLost(late_checkpoint)) << late_checkpoint;
  EXPECT_TRUE(IsClaimLost(first.status())) << first.status();
  absl::StatusOr<v1::GetResponse> got = client_->Get(kNs, Key());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->record().result(), "shipped after charge ch_42");
}

}  // namespace
}  // namespace run_once_features_test
}  // namespace dedup
