// CoalescingClient, Client::BeginBatch and the server's cap on the stored
// results one BeginBatch answer carries (--max_batch_response_bytes): the
// Begins refused for it (ItemError.reason "RESULT_BUDGET", or from an older
// server only the message "ask for this item again") go again in batches
// that fit, without spending the callers' attempts, and still end when
// nothing fits.
#include <atomic>
#include <chrono>
#include <memory>
#include <ostream>
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
constexpr char kBudgetReason[] = "RESULT_BUDGET";

// How a scripted server marks a refusal for the budget: as dedupd does now
// (reason, here with a message that does not say it, so that only the
// reason can be what the client reads), or as older servers did (message).
enum class Mark { kReason, kMessage };

std::string MarkName(const ::testing::TestParamInfo<Mark>& info) {
  return info.param == Mark::kReason ? "Reason" : "Message";
}
void PrintTo(Mark mark, std::ostream* os) {
  *os << (mark == Mark::kReason ? "reason" : "message");
}

v1::ItemError BudgetError(Mark mark) {
  v1::ItemError error;
  error.set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  if (mark == Mark::kReason) {
    error.set_message("results: over this answer's budget");
    error.set_reason(kBudgetReason);
  } else {
    error.set_message(kBudgetMessage);
  }
  return error;
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

CoalescingOptions Options(int max_attempts) {
  CoalescingOptions options;
  // The batch RPCs' path (Session streams: session_*test.cc).
  options.stream = false;
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
// refuses the rest as past the budget, as dedupd does, marked by `mark`;
// answers batch number `fail_batch` (0-based; -1: none) INTERNAL instead.
// The first batch is held until Open(), so calls made meanwhile queue into
// one batch.
class BudgetServer {
 public:
  explicit BudgetServer(int fit, Mark mark = Mark::kReason, int fail_batch = -1)
      : service_([this, fit, mark, fail_batch](const v1::BeginBatchRequest& req,
                                               v1::BeginBatchResponse* resp) {
          if (HoldFirst() == fail_batch) {
            return grpc::Status(grpc::StatusCode::INTERNAL, "scripted failure");
          }
          for (int i = 0; i < req.items_size(); ++i) {
            if (i < fit) {
              v1::BeginResponse* r = resp->add_items()->mutable_response();
              r->set_status(v1::BeginResponse::DUPLICATE);
              r->set_result("stored");
            } else {
              *resp->add_items()->mutable_error() = BudgetError(mark);
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
  // The owners of the batches after the first, in the order sent.
  std::vector<std::string> ResentOwners() const {
    std::vector<std::string> owners;
    const std::vector<v1::BeginBatchRequest> begins = service_.begins();
    for (size_t b = 1; b < begins.size(); ++b) {
      for (const v1::BeginRequest& item : begins[b].items()) {
        owners.push_back(item.owner());
      }
    }
    return owners;
  }
  void WaitForFirstBatch() { first_.WaitForNotification(); }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  // Returns the batch's number.
  int HoldFirst() {
    const int batch = batches_++;
    if (batch != 0) return batch;
    first_.Notify();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
    return batch;
  }

  std::atomic<int> batches_{0};
  absl::Notification first_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  BatchService service_;
  InProcessServer server_;
};

v1::ItemError ItemError(grpc::StatusCode code, const std::string& message,
                        const std::string& reason) {
  v1::ItemError error;
  error.set_code(static_cast<int>(code));
  error.set_message(message);
  error.set_reason(reason);
  return error;
}

TEST(ResultBudgetTest, TheReasonMarksTheRefusal) {
  const absl::Status refused = ItemStatus(BudgetError(Mark::kReason));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsResultBudgetRefusal(refused));
  // Kept when the item is renumbered for the caller's batch.
  EXPECT_TRUE(IsResultBudgetRefusal(RenumberItem(
      ItemStatus(ItemError(grpc::StatusCode::UNAVAILABLE,
                           "items[0].results: over", kBudgetReason)),
      0, 5)));
  // Another reason is not one, whatever the message says; nor a code other
  // than UNAVAILABLE (only that one says that nothing happened).
  EXPECT_FALSE(IsResultBudgetRefusal(ItemStatus(
      ItemError(grpc::StatusCode::UNAVAILABLE, kBudgetMessage, "OTHER"))));
  EXPECT_FALSE(IsResultBudgetRefusal(
      ItemStatus(ItemError(grpc::StatusCode::ABORTED, "over", kBudgetReason))));
  EXPECT_FALSE(IsResultBudgetRefusal(
      ItemStatus(ItemError(grpc::StatusCode::UNAVAILABLE, "not leading", ""))));
}

TEST(ResultBudgetTest, WithoutAReasonTheMessageMarksTheRefusal) {
  EXPECT_TRUE(IsResultBudgetRefusal(ItemStatus(BudgetError(Mark::kMessage))));
  EXPECT_TRUE(IsResultBudgetRefusal(absl::UnavailableError(kBudgetMessage)));
  EXPECT_FALSE(IsResultBudgetRefusal(absl::UnavailableError("not leading")));
  EXPECT_FALSE(IsResultBudgetRefusal(absl::AbortedError(kBudgetMessage)));
}

class ResultBudgetTest : public ::testing::TestWithParam<Mark> {};

// 20 calls queue behind a held one; their batch is answered two at a time.
// With 2 attempts, re-sending the refused 18 all together would answer two
// more and fail 16 callers; instead they go in batches of two, at once.
TEST_P(ResultBudgetTest, RefusedBeginsGoAgainInBatchesThatFitWithoutAttempts) {
  BudgetServer server(/*fit=*/2, GetParam());
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
TEST_P(ResultBudgetTest, RefusalsWithNothingAnsweredSpendAttempts) {
  BudgetServer server(/*fit=*/0, GetParam());
  server.Open();
  CoalescingClient client(ChannelTo(server.address()), Options(3));
  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item("k", 0));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.status().message(), BudgetError(GetParam()).message());
  EXPECT_THAT(server.BatchSizes(), ElementsAre(1, 1, 1));
}

ClientOptions BatchOptions(int max_attempts) {
  return Options(max_attempts).rpc;
}

std::vector<BeginBatchItem> Items(int n) {
  std::vector<BeginBatchItem> items;
  for (int i = 0; i < n; ++i) items.push_back(Item("k", i));
  return items;
}

std::vector<std::string> Owners(int from, int to) {
  std::vector<std::string> owners;
  for (int i = from; i < to; ++i) owners.push_back(absl::StrCat("owner-", i));
  return owners;
}

// One attempt only: the re-sends of a batch answered three at a time are
// not attempts.
TEST_P(ResultBudgetTest, BeginBatchSendsRefusedItemsAgainInBatchesThatFit) {
  BudgetServer server(/*fit=*/3, GetParam());
  server.Open();
  Client client(server.address(), BatchOptions(/*max_attempts=*/1));
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(Items(10));
  ASSERT_TRUE(results.ok()) << results.status();
  for (const absl::StatusOr<v1::BeginResponse>& r : *results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->result(), "stored");
  }
  EXPECT_THAT(server.BatchSizes(), ElementsAre(10, 3, 3, 1));
  // Each refused item went again once, in order, with its owner.
  EXPECT_THAT(server.ResentOwners(), ElementsAreArray(Owners(3, 10)));
}

TEST_P(ResultBudgetTest, BeginBatchRefusalsWithNothingAnsweredSpendAttempts) {
  BudgetServer server(/*fit=*/0, GetParam());
  server.Open();
  Client client(server.address(), BatchOptions(/*max_attempts=*/2));
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(Items(2));
  ASSERT_TRUE(results.ok()) << results.status();
  for (const absl::StatusOr<v1::BeginResponse>& r : *results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr(BudgetError(GetParam()).message()));
  }
  EXPECT_THAT(server.BatchSizes(), ElementsAre(2, 2));
}

// The first re-send fails (INTERNAL, not retried): its items answer that
// error, the call and the other items go on.
TEST_P(ResultBudgetTest, BeginBatchResendThatFailsAnswersItsItemsOnly) {
  BudgetServer server(/*fit=*/2, GetParam(), /*fail_batch=*/1);
  server.Open();
  Client client(server.address(), BatchOptions(/*max_attempts=*/1));
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(Items(5));
  ASSERT_TRUE(results.ok()) << results.status();
  std::vector<std::string> answers;
  for (const absl::StatusOr<v1::BeginResponse>& r : *results) {
    answers.push_back(
        r.ok() ? r->result()
               : std::string(absl::StatusCodeToString(r.status().code())));
  }
  EXPECT_THAT(answers, ElementsAre("stored", "stored", "INTERNAL", "INTERNAL",
                                   "stored"));
  EXPECT_THAT(server.BatchSizes(), ElementsAre(5, 2, 1));
}

INSTANTIATE_TEST_SUITE_P(Marks, ResultBudgetTest,
                         ::testing::Values(Mark::kReason, Mark::kMessage),
                         MarkName);

class ResultBudgetIntegrationTest
    : public testing::SharedDedupdTest<ResultBudgetIntegrationTest> {
 public:
  // Two 100 KB results fit one answer.
  static std::vector<std::string> Flags() {
    return {"--max_result_bytes=150000", "--max_batch_response_bytes=200000",
            "--metrics_address=127.0.0.1:0", "--event_log=off"};
  }

  // Completes `key` with `result`.
  static void Store(const std::string& key, const std::string& result) {
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
  ASSERT_NO_FATAL_FAILURE(Store(key, result));
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

// What the clients rely on: dedupd marks the items past the budget with
// reason RESULT_BUDGET (and code UNAVAILABLE).
TEST_F(ResultBudgetIntegrationTest, ServerMarksRefusalsWithTheReason) {
  const std::string key = TestName();
  ASSERT_NO_FATAL_FAILURE(Store(key, std::string(100'000, 'r')));
  v1::BeginBatchRequest request;
  for (int i = 0; i < 3; ++i) ToProto(Item(key, i), request.add_items());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::BeginBatchResponse response;
  const grpc::Status status = v1::Dedup::NewStub(ChannelTo(server().address()))
                                  ->BeginBatch(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.items_size(), 3);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(response.items(i).response().status(),
              v1::BeginResponse::DUPLICATE);
  }
  const v1::ItemError& refused = response.items(2).error();
  EXPECT_EQ(refused.code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_EQ(refused.reason(), kBudgetReason);
}

// 200 Begins of one key holding a 100 KB result in one Client::BeginBatch
// call: every item gets DUPLICATE with that result, though each answer
// carries two, and with the client's default attempts.
TEST_F(ResultBudgetIntegrationTest, BeginBatchOfOneLargeResultGetsItForAll) {
  const std::string key = TestName();
  const std::string result(100'000, 'r');
  ASSERT_NO_FATAL_FAILURE(Store(key, result));
  const double capped_before = Metric("dedup_batch_results_capped_total");
  std::vector<BeginBatchItem> items;
  for (int i = 0; i < 200; ++i) items.push_back(Item(key, i));
  Client client(server().address());
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(items);
  ASSERT_TRUE(results.ok()) << results.status();
  int duplicates = 0;
  std::string failure;
  for (const absl::StatusOr<v1::BeginResponse>& r : *results) {
    if (r.ok() && r->status() == v1::BeginResponse::DUPLICATE &&
        r->result() == result) {
      ++duplicates;
    } else if (failure.empty()) {
      failure =
          r.ok() ? r->ShortDebugString().substr(0, 80) : r.status().ToString();
    }
  }
  EXPECT_EQ(duplicates, 200) << "e.g. " << failure;
  EXPECT_GT(Metric("dedup_batch_results_capped_total"), capped_before);
}

}  // namespace
}  // namespace dedup
