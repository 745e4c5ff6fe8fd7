// CoalescingClient over Session streams against the real dedupd: the same
// sequence of Begins, Completes and Checkpoints gets the same answers (and
// refusals) over the stream as over batch RPCs, the stream path sends no
// batch RPC, and concurrent callers each get their own answer.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/coalescing_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/pin_callback_queue.h"
#include "tests/testing/http_get.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

class SessionIntegrationTest
    : public testing::SharedDedupdTest<SessionIntegrationTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=sync", "--metrics_address=127.0.0.1:0"};
  }

 protected:
  static std::unique_ptr<CoalescingClient> NewClient(bool stream) {
    CoalescingOptions options;
    options.rpc.deadline = absl::Seconds(10);
    options.stream = stream;
    return std::make_unique<CoalescingClient>(
        grpc::CreateChannel(server().address(),
                            grpc::InsecureChannelCredentials()),
        options);
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
};

// An answer without its clock readings, which differ between two runs, and
// with its fence counted from `base` (the scenario's first), as fences
// are numbered across keys.
template <typename Message>
std::string Show(const absl::StatusOr<Message>& answer, uint64_t base) {
  if (!answer.ok()) return answer.status().ToString();
  Message shown = *answer;
  if (shown.fence() >= base) shown.set_fence(shown.fence() - base + 1);
  const auto* descriptor = shown.GetDescriptor();
  for (const char* field :
       {"created_at", "completed_at", "expires_at", "lease_expires_at",
        "tombstone_expires_at", "retry_after_ms"}) {
    if (const auto* f = descriptor->FindFieldByName(field)) {
      shown.GetReflection()->ClearField(&shown, f);
    }
  }
  return shown.ShortDebugString();
}

// A sequence touching each answer kind of Begin, Complete and Checkpoint,
// and a refusal of each; what each call answered.
std::vector<std::string> RunScenario(CoalescingClient& client,
                                     const std::string& ns) {
  std::vector<std::string> seen;
  uint64_t base = 0;
  auto begin = [&](const std::string& key, const std::string& owner,
                   const std::string& args = "args") {
    BeginBatchItem item{ns, key, args, owner};
    item.lease_ms = 60000;
    absl::StatusOr<v1::BeginResponse> r = client.Begin(item);
    if (base == 0 && r.ok()) base = r->fence();
    seen.push_back(Show(r, base));
    return r.ok() ? r->fence() : 0;
  };
  auto complete = [&](const std::string& key, uint64_t fence) {
    CompleteBatchItem item{ns, key, fence, v1::SUCCESS, "result-" + key};
    seen.push_back(Show(client.Complete(item), base));
  };
  auto checkpoint = [&](const std::string& key, uint64_t fence) {
    CheckpointBatchItem item{ns, key, fence, "step", "data"};
    seen.push_back(Show(client.Checkpoint(item), base));
  };
  const uint64_t fence = begin("k1", "A");  // STARTED
  begin("k1", "A");                         // STARTED again, same fence
  begin("k1", "B");                         // IN_USE
  begin("k1", "A", "other-args");           // CONFLICT
  checkpoint("k1", fence);                  // OK
  checkpoint("k1", fence + 1);              // STALE_FENCE
  complete("k1", fence + 1);                // STALE_FENCE
  complete("k1", fence);                    // OK
  complete("k1", fence);                    // OK again (idempotent)
  begin("k1", "C");                         // DUPLICATE with the result
  checkpoint("k1", fence);                  // ALREADY_COMPLETED
  complete("missing", 1);                   // NOT_FOUND
  checkpoint("missing", 1);                 // NOT_FOUND
  begin("", "A");                           // INVALID_ARGUMENT key
  complete("k1", 0);                        // INVALID_ARGUMENT fence
  checkpoint("k1", 0);                      // INVALID_ARGUMENT fence
  return seen;
}

TEST_F(SessionIntegrationTest, SameAnswersOverTheStreamAsOverBatches) {
  std::unique_ptr<CoalescingClient> batches = NewClient(/*stream=*/false);
  const std::vector<std::string> over_batches =
      RunScenario(*batches, "session-batch");
  ASSERT_GT(Rpcs("BeginBatch"), 0);  // the metric is what we think it is

  std::unique_ptr<CoalescingClient> streams = NewClient(/*stream=*/true);
  const double begin_batches = Rpcs("BeginBatch");
  const double complete_batches = Rpcs("CompleteBatch");
  const double checkpoint_batches = Rpcs("CheckpointBatch");
  const std::vector<std::string> over_stream =
      RunScenario(*streams, "session-stream");
  EXPECT_EQ(over_stream, over_batches);
  // Answered by the stream, not by batch RPCs.
  EXPECT_EQ(Rpcs("BeginBatch"), begin_batches);
  EXPECT_EQ(Rpcs("CompleteBatch"), complete_batches);
  EXPECT_EQ(Rpcs("CheckpointBatch"), checkpoint_batches);
}

TEST_F(SessionIntegrationTest, ConcurrentCallersGetTheirOwnAnswers) {
  std::unique_ptr<CoalescingClient> client = NewClient(/*stream=*/true);
  constexpr int kCalls = 500;
  absl::Mutex mu;
  std::vector<std::string> wrong;
  int answered = 0;
  for (int i = 0; i < kCalls; ++i) {
    BeginBatchItem item{"session-many", absl::StrCat("k", i), "args",
                        absl::StrCat("owner-", i)};
    client->BeginAsync(item, [&, i](absl::StatusOr<v1::BeginResponse> r) {
      CompleteBatchItem done{"session-many", absl::StrCat("k", i),
                             r.ok() ? r->fence() : 0, v1::SUCCESS,
                             absl::StrCat("r", i)};
      if (!r.ok() || r->status() != v1::BeginResponse::STARTED) {
        absl::MutexLock lock(&mu);
        wrong.push_back(Show(r, 0));
        ++answered;
        return;
      }
      client->CompleteAsync(done, [&](absl::StatusOr<v1::CompleteResponse> c) {
        absl::MutexLock lock(&mu);
        if (!c.ok() || c->status() != v1::CompleteResponse::OK) {
          wrong.push_back(Show(c, 0));
        }
        ++answered;
      });
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](int* n) { return *n == kCalls; }, &answered));
  EXPECT_THAT(wrong, ::testing::IsEmpty());
  // Each key's DUPLICATE holds its own result.
  for (int i : {0, kCalls / 2, kCalls - 1}) {
    mu.Unlock();
    absl::StatusOr<v1::BeginResponse> again = client->Begin(
        {"session-many", absl::StrCat("k", i), "args", "someone-else"});
    mu.Lock();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->status(), v1::BeginResponse::DUPLICATE);
    EXPECT_EQ(again->result(), absl::StrCat("r", i));
  }
}

class SessionBudgetTest : public testing::SharedDedupdTest<SessionBudgetTest> {
 public:
  // Two 100 KB results fit one answer frame.
  static std::vector<std::string> Flags() {
    return {"--max_result_bytes=150000", "--max_batch_response_bytes=200000",
            "--event_log=off"};
  }
};

// 200 concurrent Begins of one key holding a 100 KB result, over the
// stream: each gets DUPLICATE with that result, whether its answer came on
// the stream, went again after a RESULT_BUDGET refusal, or (an answer frame
// past the client's 4 MiB message limit ends the stream) went again alone
// as a batch RPC.
TEST_F(SessionBudgetTest, ManyCallersOfOneLargeResultAllGetIt) {
  const std::string result(100'000, 'r');
  CoalescingOptions options;
  options.rpc.deadline = absl::Seconds(10);
  options.rpc.max_attempts = 2;
  auto client = std::make_unique<CoalescingClient>(
      grpc::CreateChannel(server().address(),
                          grpc::InsecureChannelCredentials()),
      options);
  absl::StatusOr<v1::BeginResponse> begun =
      client->Begin({"budget", "key", "hash", "writer"});
  ASSERT_TRUE(begun.ok()) << begun.status();
  ASSERT_TRUE(
      client->Complete({"budget", "key", begun->fence(), v1::SUCCESS, result})
          .ok());
  constexpr int kCallers = 200;
  absl::Mutex mu;
  int duplicates = 0;
  std::vector<std::string> failures;
  for (int i = 0; i < kCallers; ++i) {
    client->BeginAsync({"budget", "key", "hash", absl::StrCat("reader-", i)},
                       [&](absl::StatusOr<v1::BeginResponse> r) {
                         absl::MutexLock lock(&mu);
                         if (r.ok() &&
                             r->status() == v1::BeginResponse::DUPLICATE &&
                             r->result() == result) {
                           ++duplicates;
                         } else {
                           failures.push_back(r.ok() ? r->ShortDebugString()
                                                     : r.status().ToString());
                         }
                       });
  }
  client.reset();  // waits for every answer
  EXPECT_EQ(duplicates, kCallers);
  EXPECT_THAT(failures, ::testing::IsEmpty());
}

}  // namespace
}  // namespace dedup
