// CoalescingClient: when calls leave (at once when a batch slot is free,
// else together in the next batch), that every caller gets its own item's
// answer or error, retries, and the lifecycle against the real dedupd under
// concurrent callers.
#include "client/coalescing_client.h"

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/batch_service.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

CoalescingOptions Options(int in_flight, int max_items = 256) {
  CoalescingOptions options;
  // The batch RPCs' path (Session streams: session_*test.cc).
  options.stream = false;
  options.rpc.deadline = absl::Seconds(10);
  options.rpc.max_attempts = 4;
  options.rpc.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  options.max_batches_in_flight = in_flight;
  options.max_batch_items = max_items;
  return options;
}

BeginBatchItem Item(const std::string& key) {
  BeginBatchItem item;
  item.ns = "coalesce";
  item.key = key;
  item.args_hash = "hash";
  item.owner = "owner-" + key;
  return item;
}

// Answers each Begin item STARTED with the number in its key ("k17" -> 17)
// as fence, so a test can tell whose answer reached whom; refuses an item
// whose key has no number as dedupd refuses an invalid item.
grpc::Status FenceFromKey(const v1::BeginBatchRequest& req,
                          v1::BeginBatchResponse* resp) {
  for (int i = 0; i < req.items_size(); ++i) {
    const v1::BeginRequest& item = req.items(i);
    uint64_t n = 0;
    if (!absl::SimpleAtoi(item.key().substr(1), &n)) {
      v1::ItemError* e = resp->add_items()->mutable_error();
      e->set_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      e->set_message(absl::StrCat("items[", i, "].key: no number"));
      continue;
    }
    v1::BeginResponse* r = resp->add_items()->mutable_response();
    r->set_status(v1::BeginResponse::STARTED);
    r->set_fence(n);
  }
  return grpc::Status::OK;
}

std::vector<int> BatchSizes(const BatchService& service) {
  std::vector<int> sizes;
  for (const v1::BeginBatchRequest& req : service.begins()) {
    sizes.push_back(req.items_size());
  }
  return sizes;
}

// A server that holds the first batch (of either kind) until Open(), so
// calls made in the meantime must queue behind a busy slot; then answers with
// the given handlers (Begins by default as FenceFromKey).
class FirstBatchHeld {
 public:
  explicit FirstBatchHeld(BatchService::BeginHandler on_begin = FenceFromKey,
                          BatchService::CompleteHandler on_complete = nullptr)
      : service_(
            [this, on_begin](const v1::BeginBatchRequest& req,
                             v1::BeginBatchResponse* resp) {
              HoldFirst();
              return on_begin(req, resp);
            },
            [this, on_complete](const v1::CompleteBatchRequest& req,
                                v1::CompleteBatchResponse* resp) {
              HoldFirst();
              return on_complete
                         ? on_complete(req, resp)
                         : grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
            }),
        server_(&service_) {}
  // A test that failed before Open() must not hang in the server's shutdown.
  ~FirstBatchHeld() { Open(); }

  std::string address() const { return server_.address(); }
  const BatchService& service() const { return service_; }
  void WaitForFirstBatch() { first_arrived_.WaitForNotification(); }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  void HoldFirst() {
    if (batches_++ != 0) return;
    first_arrived_.Notify();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
  }

  std::atomic<int> batches_{0};
  absl::Notification first_arrived_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  BatchService service_;
  InProcessServer server_;
};

TEST(CoalescingClientTest, LoneCallLeavesAtOnceAsABatchOfOne) {
  BatchService service(FenceFromKey);
  InProcessServer server(&service);
  CoalescingClient client(ChannelTo(server.address()), Options(1));

  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item("k7"));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->fence(), 7u);
  answer = client.Begin(Item("k8"));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->fence(), 8u);
  EXPECT_THAT(BatchSizes(service), ElementsAre(1, 1));
  const v1::BeginRequest sent = service.begins()[0].items(0);
  EXPECT_EQ(sent.namespace_(), "coalesce");
  EXPECT_EQ(sent.key(), "k7");
  EXPECT_EQ(sent.args_hash(), "hash");
  EXPECT_EQ(sent.owner(), "owner-k7");
}

TEST(CoalescingClientTest, CallsMadeWhileTheSlotIsBusyLeaveTogether) {
  FirstBatchHeld server;
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options(1));

  constexpr int kCalls = 20;
  std::vector<uint64_t> fences(kCalls, 0);
  std::atomic<int> answered{0};
  auto call = [&](int i) {
    client->BeginAsync(Item(absl::StrCat("k", i)),
                       [&, i](absl::StatusOr<v1::BeginResponse> r) {
                         fences[i] = r.ok() ? r->fence() : 9999;
                         ++answered;
                       });
  };
  call(0);
  server.WaitForFirstBatch();
  for (int i = 1; i < kCalls / 2; ++i) call(i);
  // An invalid item amid the batch: its caller alone gets the refusal, with
  // the message a unary Begin would have had.
  absl::Status refused;
  client->BeginAsync(Item("kx"), [&](absl::StatusOr<v1::BeginResponse> r) {
    refused = r.status();
  });
  for (int i = kCalls / 2; i < kCalls; ++i) call(i);
  EXPECT_EQ(answered.load(), 0);
  server.Open();
  client.reset();  // waits for every answer

  EXPECT_EQ(answered.load(), kCalls);
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(fences[i], uint64_t(i)) << i;
  EXPECT_EQ(refused, absl::InvalidArgumentError("key: no number"));
  EXPECT_THAT(BatchSizes(server.service()), ElementsAre(1, kCalls));
}

TEST(CoalescingClientTest, QueuedCallsSplitIntoBatchesOfAtMostMaxItems) {
  FirstBatchHeld server;
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options(1, 3));
  std::atomic<int> ok{0};
  auto call = [&](int i) {
    client->BeginAsync(Item(absl::StrCat("k", i)),
                       [&, i](absl::StatusOr<v1::BeginResponse> r) {
                         if (r.ok() && r->fence() == uint64_t(i)) ++ok;
                       });
  };
  call(0);
  server.WaitForFirstBatch();
  for (int i = 1; i <= 7; ++i) call(i);
  server.Open();
  client.reset();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_THAT(BatchSizes(server.service()), ElementsAre(1, 3, 3, 1));
}

TEST(CoalescingClientTest, EachCallerGetsItsOwnItemError) {
  BatchService service(
      [](const v1::BeginBatchRequest& req, v1::BeginBatchResponse* resp) {
        for (int i = 0; i < req.items_size(); ++i) {
          if (req.items(i).key() == "bad") {
            v1::ItemError* e = resp->add_items()->mutable_error();
            e->set_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
            e->set_message(absl::StrCat("items[", i, "].key: bad"));
          } else {
            resp->add_items()->mutable_response()->set_status(
                v1::BeginResponse::STARTED);
          }
        }
        return grpc::Status::OK;
      });
  InProcessServer server(&service);
  CoalescingClient client(ChannelTo(server.address()), Options(1));
  absl::StatusOr<v1::BeginResponse> bad = client.Begin(Item("bad"));
  EXPECT_EQ(bad.status(), absl::InvalidArgumentError("key: bad"));
  absl::StatusOr<v1::BeginResponse> good = client.Begin(Item("good"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->status(), v1::BeginResponse::STARTED);
}

TEST(CoalescingClientTest,
     BatchFailureReachesEveryCallerAndUnavailableIsRetried) {
  std::atomic<int> calls{0};
  BatchService service(
      [&](const v1::BeginBatchRequest& req, v1::BeginBatchResponse* resp) {
        const int n = ++calls;
        if (n == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "later");
        if (n == 2) return FenceFromKey(req, resp);
        if (n == 3) {
          return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full");
        }
        resp->add_items();  // two answers for one item
        resp->add_items();
        return grpc::Status::OK;
      });
  InProcessServer server(&service);
  CoalescingClient client(ChannelTo(server.address()), Options(1));

  absl::StatusOr<v1::BeginResponse> retried = client.Begin(Item("k5"));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->fence(), 5u);
  ASSERT_EQ(service.begins().size(), 2u);
  EXPECT_EQ(service.begins()[1].items(0).owner(), "owner-k5");

  EXPECT_EQ(client.Begin(Item("k6")).status(),
            absl::ResourceExhaustedError("full"));
  absl::StatusOr<v1::BeginResponse> broken = client.Begin(Item("k7"));
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(broken.status().message()),
              HasSubstr("BeginBatch: the server answered 2 items for 1"));
}

// The first batch is held while three more calls queue; that batch of
// three is refused RESOURCE_EXHAUSTED (as for a message over a size limit),
// and each of its calls goes again alone and gets its own answer.
TEST(CoalescingClientTest, BatchRefusedAsTooLargeIsSentAgainItemByItem) {
  FirstBatchHeld server(
      [](const v1::BeginBatchRequest& req, v1::BeginBatchResponse* resp) {
        if (req.items_size() > 1) {
          return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "message larger than max");
        }
        return FenceFromKey(req, resp);
      });
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options(1));
  std::vector<uint64_t> fences(4, 0);
  for (int i = 0; i < 4; ++i) {
    client->BeginAsync(Item(absl::StrCat("k", i)),
                       [&, i](absl::StatusOr<v1::BeginResponse> r) {
                         fences[i] = r.ok() ? r->fence() : 9999;
                       });
    if (i == 0) server.WaitForFirstBatch();
  }
  server.Open();
  client.reset();
  EXPECT_THAT(fences, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(BatchSizes(server.service()), ElementsAre(1, 3, 1, 1, 1));
  // Each item went again with its owner.
  std::vector<std::string> resent;
  for (const v1::BeginBatchRequest& req : server.service().begins()) {
    if (req.items_size() == 1) resent.push_back(req.items(0).owner());
  }
  EXPECT_THAT(resent, ::testing::UnorderedElementsAre("owner-k0", "owner-k1",
                                                      "owner-k2", "owner-k3"));
}

// Complete results of 1 MiB: a batch closes before 3 MiB, so no request
// passes the 4 MiB message limits.
TEST(CoalescingClientTest, LargeResultsSplitBatchesBySize) {
  FirstBatchHeld server(FenceFromKey, [](const v1::CompleteBatchRequest& req,
                                         v1::CompleteBatchResponse* resp) {
    for (int i = 0; i < req.items_size(); ++i) {
      resp->add_items()->mutable_response()->set_status(
          v1::CompleteResponse::OK);
    }
    return grpc::Status::OK;
  });
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options(1));
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    CompleteBatchItem item;
    item.ns = "coalesce";
    item.key = absl::StrCat("k", i);
    item.fence = 1;
    item.outcome = v1::SUCCESS;
    item.result = std::string(1 << 20, 'r');
    client->CompleteAsync(item, [&](absl::StatusOr<v1::CompleteResponse> r) {
      if (r.ok() && r->status() == v1::CompleteResponse::OK) ++ok;
    });
    if (i == 0) server.WaitForFirstBatch();
  }
  server.Open();
  client.reset();
  EXPECT_EQ(ok.load(), 6);
  std::vector<int> items;
  for (const v1::CompleteBatchRequest& req : server.service().completes()) {
    items.push_back(req.items_size());
  }
  EXPECT_THAT(items, ElementsAre(1, 2, 2, 1));
}

class CoalescingClientIntegrationTest
    : public testing::SharedDedupdTest<CoalescingClientIntegrationTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=sync", "--metrics_address=127.0.0.1:0"};
  }

  // RPCs the server answered for `method` so far.
  static double Rpcs(const std::string& method) {
    absl::StatusOr<std::string> text =
        testing::HttpGet(server().metrics_port(), "/metrics");
    if (!text.ok()) return -1;
    absl::StatusOr<double> n = testing::SampleValue(
        *text, absl::StrCat("dedup_request_duration_seconds_count{method=\"",
                            method, "\"}"));
    return n.ok() ? *n : -1;
  }
};

// 32 threads each run Begin, Complete, then Begin again on their own keys,
// plus two Begins of one shared key per round: every answer is the one a
// unary call would give, and the server saw fewer RPCs than calls.
TEST_F(CoalescingClientIntegrationTest, ConcurrentCallersGetUnaryAnswers) {
  CoalescingClient client(ChannelTo(server().address()), Options(2));
  const double unary_begins = Rpcs("Begin");
  const double unary_completes = Rpcs("Complete");
  const double begin_batches = Rpcs("BeginBatch");
  constexpr int kThreads = 32;
  constexpr int kRounds = 20;
  std::atomic<int> failures{0};
  std::atomic<int> shared_started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        BeginBatchItem item = Item(absl::StrCat(TestName(), "/", t, "/", r));
        absl::StatusOr<v1::BeginResponse> begun = client.Begin(item);
        if (!begun.ok() || begun->status() != v1::BeginResponse::STARTED) {
          ++failures;
          continue;
        }
        CompleteBatchItem done;
        done.ns = item.ns;
        done.key = item.key;
        done.fence = begun->fence();
        done.outcome = v1::SUCCESS;
        done.result = absl::StrCat("result-", t, "-", r);
        absl::StatusOr<v1::CompleteResponse> completed = client.Complete(done);
        if (!completed.ok() ||
            completed->status() != v1::CompleteResponse::OK) {
          ++failures;
          continue;
        }
        item.owner += "-retry";
        absl::StatusOr<v1::BeginResponse> again = client.Begin(item);
        if (!again.ok() || again->status() != v1::BeginResponse::DUPLICATE ||
            again->result() != done.result || again->fence() != done.fence) {
          ++failures;
        }
        // Every thread races for one key per round: exactly one wins.
        BeginBatchItem contested =
            Item(absl::StrCat(TestName(), "/shared/", r));
        contested.owner = absl::StrCat("thread-", t);  // not re-entrant
        absl::StatusOr<v1::BeginResponse> shared = client.Begin(contested);
        if (shared.ok() && shared->status() == v1::BeginResponse::STARTED) {
          ++shared_started;
        } else if (!shared.ok() ||
                   shared->status() != v1::BeginResponse::IN_USE) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared_started.load(), kRounds);
  // Every call went as a batch item, and batches carried several at once.
  EXPECT_EQ(Rpcs("Begin"), unary_begins);
  EXPECT_EQ(Rpcs("Complete"), unary_completes);
  const double begin_rpcs = Rpcs("BeginBatch") - begin_batches;
  EXPECT_GT(begin_rpcs, 0);
  EXPECT_LT(begin_rpcs, kThreads * kRounds * 3 / 2.0);
}

// dedupd refuses a whole request with a string that is not UTF-8 ("request:
// cannot be parsed as the request of <method>"). 8 threads Begin and
// Complete concurrently, one of them with a key (or owner) that is not
// UTF-8: that caller alone is refused, exactly as its unary call is, and
// every other call gets its own answer.
TEST_F(CoalescingClientIntegrationTest,
       AStringThatIsNotUtf8FailsOnlyItsCaller) {
  const std::string bad = TestName() + "/bad\xff";
  Client unary(server().address());
  BeginOptions owned;
  owned.owner = "owner";
  const absl::Status begin_refused =
      unary.Begin("coalesce", bad, "hash", owned).status();
  ASSERT_EQ(begin_refused.code(), absl::StatusCode::kInvalidArgument)
      << begin_refused;
  ASSERT_THAT(std::string(begin_refused.message()),
              StartsWith("request: cannot be parsed as the request of "
                         "/dedup.v1.Dedup/Begin "));
  owned.owner = "owner\xff";
  ASSERT_EQ(unary.Begin("coalesce", TestName(), "hash", owned).status(),
            begin_refused);
  const absl::Status complete_refused =
      unary.Complete("coalesce", bad, 1, v1::SUCCESS, "r").status();
  ASSERT_EQ(complete_refused.code(), absl::StatusCode::kInvalidArgument)
      << complete_refused;
  ASSERT_THAT(std::string(complete_refused.message()),
              StartsWith("request: cannot be parsed as the request of "
                         "/dedup.v1.Dedup/Complete "));

  CoalescingClient client(ChannelTo(server().address()), Options(1));
  const double begin_batches = Rpcs("BeginBatch");
  constexpr int kThreads = 8;
  constexpr int kRounds = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto fail = [&](int r, const std::string& what,
                      const absl::Status& status) {
        if (failures++ < 5) {
          ADD_FAILURE() << "thread " << t << " round " << r << ": " << what
                        << ": " << status;
        }
      };
      for (int r = 0; r < kRounds; ++r) {
        BeginBatchItem item = Item(absl::StrCat(TestName(), "/", t, "/", r));
        if (t == 3) {
          // Odd rounds: a bad owner on a good key.
          if (r % 2 == 0) {
            item.key = bad;
          } else {
            item.owner = "owner\xff";
          }
          const absl::Status begun = client.Begin(item).status();
          if (begun != begin_refused) fail(r, "Begin", begun);
          CompleteBatchItem done;
          done.ns = item.ns;
          done.key = bad;
          done.fence = 1;
          done.outcome = v1::SUCCESS;
          done.result = "r";
          const absl::Status completed = client.Complete(done).status();
          if (completed != complete_refused) fail(r, "Complete", completed);
          continue;
        }
        absl::StatusOr<v1::BeginResponse> begun = client.Begin(item);
        if (!begun.ok() || begun->status() != v1::BeginResponse::STARTED) {
          fail(r, "Begin", begun.status());
          continue;
        }
        CompleteBatchItem done;
        done.ns = item.ns;
        done.key = item.key;
        done.fence = begun->fence();
        done.outcome = v1::SUCCESS;
        done.result = absl::StrCat("result-", t, "-", r);
        absl::StatusOr<v1::CompleteResponse> completed = client.Complete(done);
        if (!completed.ok() ||
            completed->status() != v1::CompleteResponse::OK) {
          fail(r, "Complete", completed.status());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // The good callers still shared batches.
  const double begin_rpcs = Rpcs("BeginBatch") - begin_batches;
  EXPECT_GT(begin_rpcs, 0);
  EXPECT_LT(begin_rpcs, (kThreads - 1) * kRounds);
}

// RunOnce with RunOptions::coalescing: 24 threads on 6 keys. Each key's side
// effect runs exactly once; the others get its outcome as a duplicate, the
// first Begins and every Complete travel in batches.
TEST_F(CoalescingClientIntegrationTest, RunOnceThroughItRunsEachKeyOnce) {
  CoalescingClient coalescing(ChannelTo(server().address()), Options(2));
  Client client(server().address());
  const double unary_completes = Rpcs("Complete");
  const double complete_batches = Rpcs("CompleteBatch");
  const double begin_batches = Rpcs("BeginBatch");
  constexpr int kThreads = 24;
  constexpr int kKeys = 6;
  std::array<std::atomic<int>, kKeys> runs{};
  std::vector<absl::StatusOr<RunResult>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int k = t % kKeys;
      RunOptions options;
      options.coalescing = &coalescing;
      results[t] = RunOnce(
          client, "coalesce", absl::StrCat(TestName(), "/", k), "hash",
          [&, k](const Claim&) {
            ++runs[k];
            return ExecResult::Success(absl::StrCat("sent-", k));
          },
          options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(runs[k].load(), 1) << k;
  int duplicates = 0;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].ok()) << results[t].status();
    EXPECT_EQ(results[t]->outcome, v1::SUCCESS);
    EXPECT_EQ(results[t]->result, absl::StrCat("sent-", t % kKeys));
    duplicates += results[t]->duplicate;
  }
  EXPECT_EQ(duplicates, kThreads - kKeys);
  EXPECT_EQ(Rpcs("Complete"), unary_completes);
  EXPECT_GT(Rpcs("CompleteBatch"), complete_batches);
  EXPECT_GT(Rpcs("BeginBatch"), begin_batches);
}

}  // namespace
}  // namespace dedup
