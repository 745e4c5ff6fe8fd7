// CoalescingClient's Checkpoints against the real dedupd: concurrent callers
// share CheckpointBatch RPCs (seen in its metrics) and a takeover resumes
// from the last checkpoint, items sent together get their own answers, an
// item the server cannot parse fails alone, and RunOnce's Claim::Checkpoint
// goes through it. Against scripted nodes: coalescing_checkpoint_test.cc.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/coalescing_checkpoint_helpers.h"
#include "tests/testing/http_get.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace coalescing_checkpoint_integration_test {
namespace {

using ::dedup::checkpoint_test::Answers;
using ::dedup::checkpoint_test::ChannelTo;
using ::dedup::checkpoint_test::Item;
using ::dedup::checkpoint_test::Options;
using ::testing::StartsWith;

class CoalescingCheckpointIntegrationTest
    : public testing::SharedDedupdTest<CoalescingCheckpointIntegrationTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=sync", "--metrics_address=127.0.0.1:0"};
  }

 protected:
  void SetUp() override {
    SharedDedupdTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = std::make_unique<Client>(server().address());
  }

  // RPCs the server answered for `method` so far (0 before the first).
  static double Rpcs(const std::string& method) {
    absl::StatusOr<double> n = testing::ScrapeSample(
        server().metrics_port(),
        absl::StrCat("dedup_request_duration_seconds_count{method=\"", method,
                     "\"}"));
    if (absl::IsNotFound(n.status())) return 0;
    EXPECT_TRUE(n.ok()) << n.status();
    return n.value_or(-1);
  }

  // Begins `key` for `owner` with a short lease; its fence.
  uint64_t BeginFor(const std::string& key, const std::string& owner,
                    uint32_t lease_ms = 1000) {
    BeginOptions options;
    options.owner = owner;
    options.lease_ms = lease_ms;
    absl::StatusOr<v1::BeginResponse> begun =
        client_->Begin("ckpt", key, "args", options);
    EXPECT_TRUE(begun.ok()) << begun.status();
    EXPECT_EQ(begun.value_or(v1::BeginResponse()).status(),
              v1::BeginResponse::STARTED);
    return begun.ok() ? begun->fence() : 0;
  }

  // Begins `key` for `owner` until the previous owner's lease has run out
  // and this Begin takes over (polled: at most 10 s).
  v1::BeginResponse TakeOver(const std::string& key, const std::string& owner) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    BeginOptions options;
    options.owner = owner;
    while (absl::Now() < deadline) {
      absl::StatusOr<v1::BeginResponse> begun =
          client_->Begin("ckpt", key, "args", options);
      if (!begun.ok()) {
        ADD_FAILURE() << begun.status();
        break;
      }
      if (begun->status() != v1::BeginResponse::IN_USE) return *begun;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << key << " was not taken over in 10 s";
    return {};
  }

  std::unique_ptr<Client> client_;
};

// 16 threads record 15 checkpoints each on their own keys, concurrently:
// every one is OK, they travel in fewer CheckpointBatch RPCs than calls (no
// unary Checkpoint), and a takeover of each key resumes from its last one.
TEST_F(CoalescingCheckpointIntegrationTest,
       ConcurrentCheckpointsShareBatchesAndATakeoverSeesTheLast) {
  CoalescingClient coalescing(ChannelTo(server().address()), Options(2));
  constexpr int kThreads = 16;
  constexpr int kRounds = 15;
  std::vector<uint64_t> fences(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    fences[t] = BeginFor(absl::StrCat(TestName(), "/", t), "first");
  }
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        CheckpointBatchItem item =
            Item(absl::StrCat(TestName(), "/", t), fences[t],
                 absl::StrCat("step-", r), absl::StrCat("data-", t, "-", r));
        item.lease_ms = 1000;
        absl::StatusOr<v1::CheckpointResponse> done =
            coalescing.Checkpoint(item);
        if (!done.ok() || done->status() != v1::CheckpointResponse::OK ||
            done->fence() != fences[t]) {
          ADD_FAILURE() << t << "/" << r << ": "
                        << (done.ok() ? done->DebugString()
                                      : done.status().ToString());
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  const double batches = Rpcs("CheckpointBatch") - batches_before;
  EXPECT_GT(batches, 0);
  EXPECT_LT(batches, kThreads * kRounds * 2 / 3.0);

  for (int t = 0; t < kThreads; ++t) {
    const v1::BeginResponse taken =
        TakeOver(absl::StrCat(TestName(), "/", t), "second");
    EXPECT_EQ(taken.status(), v1::BeginResponse::STARTED) << t;
    EXPECT_TRUE(taken.takeover()) << t;
    EXPECT_EQ(taken.checkpoint().step(), absl::StrCat("step-", kRounds - 1));
    EXPECT_EQ(taken.checkpoint().data(),
              absl::StrCat("data-", t, "-", kRounds - 1));
    EXPECT_EQ(taken.checkpoint().fence(), fences[t]);
  }
}

// Items sent together get their own answers: OK, STALE_FENCE (an owner that
// was taken over), NOT_FOUND, ALREADY_COMPLETED, and INVALID_ARGUMENT naming
// `step` for an empty one, which changes nothing.
TEST_F(CoalescingCheckpointIntegrationTest, EachItemGetsItsOwnAnswer) {
  const std::string live = TestName() + "/live";
  const std::string taken = TestName() + "/taken";
  const std::string done = TestName() + "/done";
  const uint64_t live_fence = BeginFor(live, "a");
  const uint64_t old_fence = BeginFor(taken, "a", /*lease_ms=*/100);
  const uint64_t new_fence = TakeOver(taken, "b").fence();
  ASSERT_GT(new_fence, old_fence);
  const uint64_t done_fence = BeginFor(done, "a");
  ASSERT_TRUE(
      client_->Complete("ckpt", done, done_fence, v1::SUCCESS, "r").ok());

  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  std::vector<CheckpointBatchItem> items = {
      Item(live, live_fence, "charged", "ch_42"),
      Item(taken, old_fence, "late"),
      Item(live, live_fence, ""),
      Item(taken, new_fence, "resumed"),
      Item(TestName() + "/never", 1),
      Item(done, done_fence),
  };
  for (int i = 0; i < 6; ++i) {
    items.push_back(Item(live, live_fence, "charged", "ch_42"));
  }
  Answers answers(static_cast<int>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    coalescing.CheckpointAsync(items[i], answers.For(static_cast<int>(i)));
  }
  ASSERT_TRUE(answers.Wait());
  auto status_of = [&](int i) {
    EXPECT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    return answers[i].ok() ? answers[i]->status()
                           : v1::CheckpointResponse::STATUS_UNSPECIFIED;
  };
  EXPECT_EQ(status_of(0), v1::CheckpointResponse::OK);
  EXPECT_EQ(status_of(1), v1::CheckpointResponse::STALE_FENCE);
  EXPECT_EQ(answers[1].value_or(v1::CheckpointResponse()).fence(), new_fence);
  EXPECT_EQ(answers[2].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(answers[2].status().message()), StartsWith("step:"));
  EXPECT_EQ(status_of(3), v1::CheckpointResponse::OK);
  EXPECT_EQ(status_of(4), v1::CheckpointResponse::NOT_FOUND);
  EXPECT_EQ(status_of(5), v1::CheckpointResponse::ALREADY_COMPLETED);
  for (size_t i = 6; i < items.size(); ++i) {
    EXPECT_EQ(status_of(static_cast<int>(i)), v1::CheckpointResponse::OK);
  }
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_GT(Rpcs("CheckpointBatch"), batches_before);

  absl::StatusOr<v1::GetResponse> got = client_->Get("ckpt", live);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->record().checkpoint().step(), "charged");
  EXPECT_EQ(got->record().checkpoint().data(), "ch_42");
  got = client_->Get("ckpt", taken);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->record().checkpoint().step(), "resumed");
}

// dedupd refuses a whole request it cannot parse (a key that is not UTF-8)
// as "request: cannot be parsed": that caller alone gets the refusal (its
// Checkpoint never joins a batch), and later Checkpoints still go in
// batches.
TEST_F(CoalescingCheckpointIntegrationTest, AKeyThatIsNotUtf8FailsAlone) {
  const std::string key = TestName();
  const uint64_t fence = BeginFor(key, "a");
  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  Answers answers(3);
  coalescing.CheckpointAsync(Item(key, fence, "one"), answers.For(0));
  coalescing.CheckpointAsync(Item(key + "\xc0\x80", fence), answers.For(1));
  coalescing.CheckpointAsync(Item(key, fence, "two"), answers.For(2));
  ASSERT_TRUE(answers.Wait());
  EXPECT_TRUE(answers[0].ok()) << answers[0].status();
  EXPECT_EQ(answers[1].status().code(), absl::StatusCode::kInvalidArgument)
      << answers[1].status();
  EXPECT_THAT(std::string(answers[1].status().message()),
              StartsWith("request: cannot be parsed"));
  EXPECT_TRUE(answers[2].ok()) << answers[2].status();

  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  absl::StatusOr<v1::CheckpointResponse> later =
      coalescing.Checkpoint(Item(key, fence, "three"));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->status(), v1::CheckpointResponse::OK);
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_EQ(Rpcs("CheckpointBatch"), batches_before + 1);
}

// RunOnce with RunOptions::coalescing: Claim::Checkpoint goes in
// CheckpointBatch RPCs; a takeover resumes from it, and the stalled owner's
// late checkpoint is refused (its claim is lost).
TEST_F(CoalescingCheckpointIntegrationTest, RunOnceCheckpointsThroughIt) {
  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  RunOptions slow;
  slow.lease_ms = 100;
  slow.renew = false;  // the first owner stalls and loses its lease
  slow.coalescing = &coalescing;
  std::optional<v1::CheckpointInfo> resumed_from;
  absl::Status late_checkpoint;
  absl::StatusOr<RunResult> first = RunOnce(
      *client_, "ckpt", TestName(), "args",
      [&](const Claim& claim) {
        EXPECT_TRUE(claim.Checkpoint("charged", "ch_42").ok());
        // Another worker waits out the lease, takes over and resumes.
        RunOptions other;
        other.coalescing = &coalescing;
        absl::StatusOr<RunResult> second = RunOnce(
            *client_, "ckpt", TestName(), "args",
            [&](const Claim& takeover) {
              EXPECT_TRUE(takeover.takeover);
              resumed_from = takeover.last_checkpoint;
              EXPECT_TRUE(takeover.Checkpoint("shipping", "sh_1").ok());
              return ExecResult::Success("shipped after charge ch_42");
            },
            other);
        EXPECT_TRUE(second.ok()) << second.status();
        late_checkpoint = claim.Checkpoint("shipped", "");
        return ExecResult::Success("too late");
      },
      slow);
  ASSERT_TRUE(resumed_from.has_value());
  EXPECT_EQ(resumed_from->step(), "charged");
  EXPECT_EQ(resumed_from->data(), "ch_42");
  EXPECT_TRUE(IsClaimLost(late_checkpoint)) << late_checkpoint;
  EXPECT_TRUE(IsClaimLost(first.status())) << first.status();
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_EQ(Rpcs("CheckpointBatch"), batches_before + 3);
}

}  // namespace
}  // namespace coalescing_checkpoint_integration_test
}  // namespace dedup
