// Unknown-outcome and leader-following retries of batch calls: Client's
// BeginBatch/CompleteBatch item by item, and CoalescingClient, against
// scripted in-process nodes (see client_failover_test.cc for unary calls).
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/failover_helpers.h"
#include "tests/client/scripted_node.h"

namespace dedup {
namespace {

using ::dedup::testing::NotLeader;
using ::dedup::testing::OutcomeUnknown;
using ::dedup::testing::ScriptedNode;
using ::google::protobuf::Message;
using ::testing::HasSubstr;

// Answers one BeginBatch item; `seen` counts earlier items with its key.
using ItemScript = std::function<void(const v1::BeginRequest& item, int seen,
                                      v1::BeginBatchResponse::Item* answer)>;

ScriptedNode::Script BatchScript(ItemScript script) {
  struct Seen {
    absl::Mutex mu;
    std::map<std::string, int> count ABSL_GUARDED_BY(mu);
  };
  auto seen = std::make_shared<Seen>();
  return [=](const std::string& method, grpc::ServerContext*,
             const Message& request, Message* response) {
    if (method != "BeginBatch") {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method);
    }
    const auto& q = static_cast<const v1::BeginBatchRequest&>(request);
    auto* r = static_cast<v1::BeginBatchResponse*>(response);
    absl::MutexLock lock(&seen->mu);
    for (const v1::BeginRequest& item : q.items()) {
      script(item, seen->count[item.key()]++, r->add_items());
    }
    return grpc::Status::OK;
  };
}

void Refuse(v1::BeginBatchResponse::Item* answer, grpc::StatusCode code,
            const std::string& message) {
  answer->mutable_error()->set_code(static_cast<int>(code));
  answer->mutable_error()->set_message(message);
}

// The item with key "N" STARTED with fence 100 + N.
void Start(const v1::BeginRequest& item, v1::BeginBatchResponse::Item* answer) {
  answer->mutable_response()->set_status(v1::BeginResponse::STARTED);
  answer->mutable_response()->set_fence(100 + std::stoi(item.key()));
}

// As Start, except that the first `times` items with a key in `aborted` get
// ItemError ABORTED (outcome unknown) instead.
ScriptedNode::Script BatchAbortingKeys(std::vector<std::string> aborted,
                                       int times) {
  return BatchScript([=](const v1::BeginRequest& item, int seen,
                         v1::BeginBatchResponse::Item* answer) {
    if (std::find(aborted.begin(), aborted.end(), item.key()) !=
            aborted.end() &&
        seen < times) {
      Refuse(answer, grpc::StatusCode::ABORTED, "leadership lost");
    } else {
      Start(item, answer);
    }
  });
}

BeginBatchItem Item(int key, const std::string& owner) {
  BeginBatchItem item;
  item.ns = "ns";
  item.key = std::to_string(key);
  item.owner = owner;
  return item;
}

TEST(UnknownOutcomeTest, BatchItemsAbortedAreResentAloneWithTheirOwners) {
  ScriptedNode node;
  node.SetScript(BatchAbortingKeys({"1", "2"}, 1));
  Client client(node.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(
      {Item(0, "o0"), Item(1, "o1"), Item(2, ""), Item(3, "o3")});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 4u);
  EXPECT_EQ((*results)[0]->fence(), 100u);
  ASSERT_TRUE((*results)[1].ok()) << (*results)[1].status();
  EXPECT_EQ((*results)[1]->fence(), 101u);
  // Anonymous: re-sending could only answer IN_USE, so it stays unknown.
  EXPECT_TRUE(IsOutcomeUnknown((*results)[2].status()))
      << (*results)[2].status();
  EXPECT_EQ((*results)[3]->fence(), 103u);

  const auto batches = node.requests<v1::BeginBatchRequest>("BeginBatch");
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].items_size(), 1);
  EXPECT_EQ(batches[1].items(0).key(), "1");
  EXPECT_EQ(batches[1].items(0).owner(), "o1");
}

TEST(UnknownOutcomeTest, BatchItemsStillAbortedAfterRetriesAreUnknown) {
  ScriptedNode node;
  node.SetScript(BatchAbortingKeys({"1"}, 1000));
  Client client(node.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results =
      client.BeginBatch({Item(0, "o0"), Item(1, "o1")});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE((*results)[0].ok());
  EXPECT_EQ((*results)[1].status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsOutcomeUnknown((*results)[1].status()));
  // The first batch and max_attempts - 1 rounds of the aborted item.
  EXPECT_EQ(node.requests<v1::BeginBatchRequest>("BeginBatch").size(), 4u);
}

TEST(UnknownOutcomeTest, UnavailableBatchItemsAreResentEvenAnonymous) {
  // Item 3 is refused UNAVAILABLE, then (alone, at position 0) with an error
  // that names its position: the caller sees its own index.
  ScriptedNode node;
  node.SetScript(BatchScript([](const v1::BeginRequest& item, int seen,
                                v1::BeginBatchResponse::Item* answer) {
    if (item.key() == "2" && seen == 0) {
      Refuse(answer, grpc::StatusCode::UNAVAILABLE, "items[2]: not proposed");
    } else if (item.key() == "3" && seen == 0) {
      Refuse(answer, grpc::StatusCode::UNAVAILABLE, "items[3]: not proposed");
    } else if (item.key() == "3") {
      Refuse(answer, grpc::StatusCode::INVALID_ARGUMENT,
             "items[1].key: refused");
    } else {
      Start(item, answer);
    }
  }));
  Client client(node.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(
      {Item(0, "o0"), Item(1, "o1"), Item(2, ""), Item(3, "o3")});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_TRUE((*results)[2].ok()) << (*results)[2].status();
  EXPECT_EQ((*results)[2]->fence(), 102u);
  EXPECT_EQ((*results)[3].status(),
            absl::InvalidArgumentError("items[3].key: refused"));
  const auto batches = node.requests<v1::BeginBatchRequest>("BeginBatch");
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].items_size(), 2);
  EXPECT_EQ(batches[1].items(0).key(), "2");
  EXPECT_EQ(batches[1].items(1).key(), "3");
}

TEST(UnknownOutcomeTest, BatchItemUnknownThenUnavailableStaysUnknown) {
  ScriptedNode node;
  node.SetScript(BatchScript([](const v1::BeginRequest& item, int seen,
                                v1::BeginBatchResponse::Item* answer) {
    if (item.key() == "1") {
      Refuse(
          answer,
          seen == 0 ? grpc::StatusCode::ABORTED : grpc::StatusCode::UNAVAILABLE,
          "not settled");
    } else {
      Start(item, answer);
    }
  }));
  Client client(node.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results =
      client.BeginBatch({Item(0, "o0"), Item(1, "o1")});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE((*results)[0].ok());
  // Its last answer says "nothing happened", but the first may have.
  EXPECT_TRUE(IsOutcomeUnknown((*results)[1].status()))
      << (*results)[1].status();
  EXPECT_EQ(node.requests<v1::BeginBatchRequest>("BeginBatch").size(), 4u);
}

TEST(UnknownOutcomeTest, WholeBatchUnknownResendsOnlyItemsWithOwners) {
  ScriptedNode node;
  node.SetScript(UnknownThen("BeginBatch", 1, BatchAbortingKeys({}, 0)));
  Client client(node.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results =
      client.BeginBatch({Item(0, "o0"), Item(1, "")});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_TRUE((*results)[0].ok()) << (*results)[0].status();
  EXPECT_EQ((*results)[0]->fence(), 100u);
  EXPECT_TRUE(IsOutcomeUnknown((*results)[1].status()))
      << (*results)[1].status();
  const auto batches = node.requests<v1::BeginBatchRequest>("BeginBatch");
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].items_size(), 1);
  EXPECT_EQ(batches[1].items(0).owner(), "o0");
}

TEST(UnknownOutcomeTest, CompleteBatchItemsAbortedAreResent) {
  ScriptedNode node;
  auto rounds = std::make_shared<std::atomic<int>>(1);
  node.SetScript([rounds](const std::string&, grpc::ServerContext*,
                          const Message& request, Message* response) {
    const auto& q = static_cast<const v1::CompleteBatchRequest&>(request);
    auto* r = static_cast<v1::CompleteBatchResponse*>(response);
    const bool abort_now = (*rounds)-- > 0;
    for (int i = 0; i < q.items_size(); ++i) {
      auto* answer = r->add_items();
      if (abort_now && i == 0) {
        answer->mutable_error()->set_code(
            static_cast<int>(grpc::StatusCode::ABORTED));
        continue;
      }
      answer->mutable_response()->set_status(v1::CompleteResponse::OK);
      answer->mutable_response()->set_fence(q.items(i).fence());
    }
    return grpc::Status::OK;
  });
  Client client(node.address(), FastRetries());
  CompleteBatchItem a{"ns", "a", 3, v1::SUCCESS, "ra"};
  CompleteBatchItem b{"ns", "b", 4, v1::ERROR, "rb"};
  absl::StatusOr<CompleteBatchResults> results = client.CompleteBatch({a, b});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_TRUE((*results)[0].ok()) << (*results)[0].status();
  EXPECT_EQ((*results)[0]->fence(), 3u);
  EXPECT_EQ((*results)[1]->fence(), 4u);
  const auto batches = node.requests<v1::CompleteBatchRequest>("CompleteBatch");
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].items_size(), 1);
  EXPECT_EQ(batches[1].items(0).SerializeAsString(),
            batches[0].items(0).SerializeAsString());
}

TEST(CoalescingFailoverTest, BatchesFollowTheLeaderAndRememberIt) {
  ScriptedNode follower, leader;
  follower.SetScript(FollowerOf(leader.address()));
  leader.SetScript(BatchAbortingKeys({}, 0));
  CoalescingOptions options;
  options.rpc = FastRetries();
  options.rpc.max_attempts = 1;  // A redirect is not a retry.
  CoalescingClient client(std::vector<std::string>{follower.address()},
                          options);
  absl::StatusOr<v1::BeginResponse> first = client.Begin(Item(1, "o"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->fence(), 101u);
  absl::StatusOr<v1::BeginResponse> second = client.Begin(Item(2, "o"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(follower.calls().size(), 1u);
  EXPECT_EQ(leader.calls().size(), 2u);
}

TEST(CoalescingFailoverTest, UnknownBatchResendsItsItems) {
  ScriptedNode node;
  node.SetScript(UnknownThen("BeginBatch", 1, BatchAbortingKeys({}, 0)));
  CoalescingOptions options;
  options.rpc = FastRetries();
  CoalescingClient client(std::vector<std::string>{node.address()}, options);
  absl::StatusOr<v1::BeginResponse> begin = client.Begin(Item(5, "o5"));
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->fence(), 105u);
  const auto batches = node.requests<v1::BeginBatchRequest>("BeginBatch");
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].items(0).owner(), "o5");
}

TEST(CoalescingFailoverTest, AbortedItemsAreResentOthersAnsweredAtOnce) {
  ScriptedNode node;
  node.SetScript(BatchAbortingKeys({"1", "2"}, 1));
  CoalescingOptions options;
  options.rpc = FastRetries();
  options.max_batches_in_flight = 1;
  CoalescingClient client(std::vector<std::string>{node.address()}, options);
  std::vector<absl::StatusOr<v1::BeginResponse>> answers(4);
  absl::Notification all;
  std::atomic<int> pending{4};
  for (int i = 0; i < 4; ++i) {
    client.BeginAsync(Item(i, i == 2 ? "" : "o" + std::to_string(i)),
                      [&, i](absl::StatusOr<v1::BeginResponse> answer) {
                        answers[i] = std::move(answer);
                        if (--pending == 0) all.Notify();
                      });
  }
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  ASSERT_TRUE(answers[1].ok()) << answers[1].status();
  EXPECT_EQ(answers[1]->fence(), 101u);
  EXPECT_TRUE(IsOutcomeUnknown(answers[2].status())) << answers[2].status();
  // The unary form: no "items[i]." prefix.
  EXPECT_THAT(std::string(answers[2].status().message()),
              ::testing::StartsWith("Begin:"));
  ASSERT_TRUE(answers[3].ok()) << answers[3].status();
  // Item 1 was sent twice, item 2 (anonymous) once.
  int sent1 = 0, sent2 = 0;
  for (const auto& batch : node.requests<v1::BeginBatchRequest>("BeginBatch")) {
    for (const auto& item : batch.items()) {
      sent1 += item.key() == "1";
      sent2 += item.key() == "2";
    }
  }
  EXPECT_EQ(sent1, 2);
  EXPECT_EQ(sent2, 1);
}

}  // namespace
}  // namespace dedup
