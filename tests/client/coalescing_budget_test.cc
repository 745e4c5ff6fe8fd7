// CoalescingClient and the server's cap on the stored results one
// BeginBatch answer carries (--max_batch_response_bytes): the Begins refused
// for it ("ask for this item again") go again in batches that fit, without
// spending the callers' attempts, and still end when nothing fits.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/batch_answers.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/batch_service.h"
#include "tests/testing/http_get.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// What dedupd answers an item past the budget (storage/store.h).
constexpr char kBudgetMessage[] =
    "results: the answers to this request passed their 200000 bytes of "
    "stored results; ask for this item again, alone or in a later batch";

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

CoalescingOptions Options(int max_attempts) {
  CoalescingOptions options;
  options.rpc.deadline = absl::Seconds(10);
  options.rpc.max_attempts = max_attempts;
  options.rpc.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  options.max_batches_in_flight = 1;
  return options;
}

BeginBatchItem Item(const std::string& key, int caller) {
  BeginBatchItem item;
  item.ns = "budget";
  item.key = key;
  item.args_hash = "hash";
  item.owner = absl::StrCat("owner-", caller);
  return item;
}

// Answers the first `fit` items of every batch DUPLICATE with a result and
// refuses the rest as past the budget, as dedupd does. The first batch is
// held until Open(), so calls made meanwhile queue into one batch.
class BudgetServer {
 public:
  explicit BudgetServer(int fit)
      : service_([this, fit](const v1::BeginBatchRequest& req,
                             v1::BeginBatchResponse* resp) {
          HoldFirst();
          for (int i = 0; i < req.items_size(); ++i) {
            if (i < fit) {
              v1::BeginResponse* r = resp->add_items()->mutable_response();
              r->set_status(v1::BeginResponse::DUPLICATE);
              r->set_result("stored");
            } else {
              v1::ItemError* e = resp->add_items()->mutable_error();
              e->set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
              e->set_message(kBudgetMessage);
            }
          }
          return grpc::Status::OK;
        }),
        server_(&service_) {}
  ~BudgetServer() { Open(); }

  std::string address() const { return server_.address(); }
  std::vector<int> BatchSizes() const {
    std::vector<int> sizes;
    for (const auto& req : service_.begins()) sizes.push_back(req.items_size());
    return sizes;
  }
  void WaitForFirstBatch() { first_.WaitForNotification(); }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  void HoldFirst() {
    if (batches_++ != 0) return;
    first_.Notify();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
  }

  std::atomic<int> batches_{0};
  absl::Notification first_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  BatchService service_;
  InProcessServer server_;
};

TEST(ResultBudgetTest, OnlyTheBudgetRefusalIsRecognised) {
  EXPECT_TRUE(IsResultBudgetRefusal(absl::UnavailableError(kBudgetMessage)));
  EXPECT_FALSE(IsResultBudgetRefusal(absl::UnavailableError("not leading")));
  EXPECT_FALSE(IsResultBudgetRefusal(absl::AbortedError(kBudgetMessage)));
}

// 20 calls queue behind a held one; their batch is answered two at a time.
// With 2 attempts, re-sending the refused 18 all together would answer two
// more and fail 16 callers; instead they go in batches of two, at once.
TEST(ResultBudgetTest, RefusedBeginsGoAgainInBatchesThatFitWithoutAttempts) {
  BudgetServer server(/*fit=*/2);
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options(/*attempts=*/2));
  constexpr int kCalls = 21;
  std::vector<std::string> answers(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client->BeginAsync(
        Item("k", i), [&, i](absl::StatusOr<v1::BeginResponse> r) {
          answers[i] = r.ok() ? r->result() : r.status().ToString();
        });
    if (i == 0) server.WaitForFirstBatch();
  }
  server.Open();
  client.reset();  // waits for every answer
  EXPECT_THAT(answers, Each(std::string("stored")));
  std::vector<int> expected = {1, 20};
  for (int i = 0; i < 9; ++i) expected.push_back(2);
  EXPECT_THAT(server.BatchSizes(), ElementsAreArray(expected));
}

// A server that never fits one: the re-sends are no longer free (nothing
// was answered), so the call ends after max_attempts like any UNAVAILABLE.
TEST(ResultBudgetTest, RefusalsWithNothingAnsweredSpendAttempts) {
  BudgetServer server(/*fit=*/0);
  server.Open();
  CoalescingClient client(ChannelTo(server.address()), Options(3));
  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item("k", 0));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(answer.status().message()),
              HasSubstr("ask for this item again"));
  EXPECT_THAT(server.BatchSizes(), ElementsAre(1, 1, 1));
}

class ResultBudgetIntegrationTest
    : public testing::SharedDedupdTest<ResultBudgetIntegrationTest> {
 public:
  // Two 100 KB results fit one answer.
  static std::vector<std::string> Flags() {
    return {"--max_result_bytes=150000", "--max_batch_response_bytes=200000",
            "--metrics_address=127.0.0.1:0", "--event_log=off"};
  }

  static double Metric(const std::string& sample) {
    absl::StatusOr<std::string> text =
        testing::HttpGet(server().metrics_port(), "/metrics");
    if (!text.ok()) return -1;
    absl::StatusOr<double> n = testing::SampleValue(*text, sample);
    return n.ok() ? *n : 0;
  }
};

// 200 concurrent coalesced Begins of one key holding a 100 KB result: every
// caller gets DUPLICATE with that result, though each answer carries two.
TEST_F(ResultBudgetIntegrationTest, ManyCallersOfOneLargeResultAllGetIt) {
  const std::string key = TestName();
  const std::string result(100'000, 'r');
  {
    Client client(server().address());
    BeginOptions writer;
    writer.owner = "writer";
    absl::StatusOr<v1::BeginResponse> begun =
        client.Begin("budget", key, "hash", writer);
    ASSERT_TRUE(begun.ok()) << begun.status();
    ASSERT_EQ(begun->status(), v1::BeginResponse::STARTED);
    absl::StatusOr<v1::CompleteResponse> done =
        client.Complete("budget", key, begun->fence(), v1::SUCCESS, result);
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->status(), v1::CompleteResponse::OK);
  }
  const double capped_before = Metric("dedup_batch_results_capped_total");
  const double batches_before =
      Metric("dedup_request_duration_seconds_count{method=\"BeginBatch\"}");

  CoalescingOptions options = Options(/*attempts=*/4);
  options.max_batches_in_flight = 2;
  auto client = std::make_unique<CoalescingClient>(
      ChannelTo(server().address()), options);
  constexpr int kCallers = 200;
  std::atomic<int> duplicates{0};
  absl::Mutex mu;
  std::vector<std::string> failures;
  for (int i = 0; i < kCallers; ++i) {
    client->BeginAsync(Item(key, i), [&](absl::StatusOr<v1::BeginResponse> r) {
      if (r.ok() && r->status() == v1::BeginResponse::DUPLICATE &&
          r->result() == result) {
        ++duplicates;
        return;
      }
      absl::MutexLock lock(&mu);
      failures.push_back(r.ok() ? r->ShortDebugString().substr(0, 80)
                                : r.status().ToString());
    });
  }
  client.reset();  // waits for every answer
  EXPECT_EQ(duplicates.load(), kCallers);
  EXPECT_TRUE(failures.empty())
      << failures.size() << " callers failed, e.g. " << failures.front();
  // The cap was what the callers met, and they did not each go alone.
  EXPECT_GT(Metric("dedup_batch_results_capped_total"), capped_before);
  const double batches =
      Metric("dedup_request_duration_seconds_count{method=\"BeginBatch\"}") -
      batches_before;
  EXPECT_LT(batches, kCallers);
}

}  // namespace
}  // namespace dedup
