// Client::BeginBatch and Client::CompleteBatch: the mapping of per-item
// answers and errors, retries (against a scripted in-process server, and
// through a proxy that loses the real dedupd's first answer), and the typed
// lifecycle against the real dedupd.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/dedup_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/batch_service.h"
#include "tests/client/shared_client.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ClientOptions FastRetries() {
  ClientOptions options;
  options.deadline = absl::Seconds(2);
  options.max_attempts = 4;
  options.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  return options;
}

std::vector<BeginBatchItem> BeginItems(const std::string& prefix, int n) {
  std::vector<BeginBatchItem> items;
  for (int i = 0; i < n; ++i) {
    BeginBatchItem item;
    item.ns = "client-batch";
    item.key = absl::StrCat(prefix, "/", i);
    item.args_hash = "hash";
    item.owner = absl::StrCat("owner-", i);
    items.push_back(item);
  }
  return items;
}

grpc::Status Unavailable() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake: try later");
}

TEST(BatchClientTest, RetriedBeginBatchResendsEveryItemWithItsOwner) {
  std::atomic<int> calls{0};
  BatchService service(
      [&](const v1::BeginBatchRequest& req, v1::BeginBatchResponse* resp) {
        if (++calls < 3) return Unavailable();
        for (int i = 0; i < req.items_size(); ++i) {
          v1::BeginResponse* r = resp->add_items()->mutable_response();
          r->set_status(v1::BeginResponse::STARTED);
          r->set_fence(100 + i);
        }
        return grpc::Status::OK;
      });
  InProcessServer server(&service);
  Client client(server.address(), FastRetries());
  std::vector<BeginBatchItem> items = BeginItems("k", 3);
  items[1].lease_ms = 5000;
  items[2].ttl_s = 60;

  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(items);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*results)[i].ok()) << (*results)[i].status();
    EXPECT_EQ((*results)[i]->fence(), 100u + i);
  }
  const std::vector<v1::BeginBatchRequest> seen = service.begins();
  ASSERT_EQ(seen.size(), 3u);
  for (const v1::BeginBatchRequest& req : seen) {
    ASSERT_EQ(req.items_size(), 3);
    for (int i = 0; i < 3; ++i) {
      const v1::BeginRequest& item = req.items(i);
      EXPECT_EQ(item.namespace_(), "client-batch");
      EXPECT_EQ(item.key(), items[i].key);
      EXPECT_EQ(item.args_hash(), "hash");
      EXPECT_EQ(item.owner(), items[i].owner);
      EXPECT_EQ(item.lease_ms(), items[i].lease_ms);
      EXPECT_EQ(item.ttl_s(), items[i].ttl_s);
      EXPECT_EQ(item.wait_ms(), 0u);
    }
  }
  // Batch items never wait, so the deadline is not extended as Begin's is;
  // the wire format rounds timeouts up a little.
  for (absl::Duration left : service.deadlines_left()) {
    EXPECT_LE(left, absl::Milliseconds(2100));
    EXPECT_GT(left, absl::Seconds(1));
  }
}

TEST(BatchClientTest, ItemErrorsAreStatusesAndOtherItemsAreAnswers) {
  BatchService service(
      [](const v1::BeginBatchRequest&, v1::BeginBatchResponse*) {
        return Unavailable();
      },
      [](const v1::CompleteBatchRequest&, v1::CompleteBatchResponse* resp) {
        resp->add_items()->mutable_response()->set_status(
            v1::CompleteResponse::STALE_FENCE);
        v1::ItemError* error = resp->add_items()->mutable_error();
        error->set_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
        error->set_message("items[1].fence: must be non-zero");
        resp->add_items();  // Neither answer nor error.
        error = resp->add_items()->mutable_error();
        error->set_code(0);  // OK is no error: a broken server.
        error->set_message("huh");
        return grpc::Status::OK;
      });
  InProcessServer server(&service);
  Client client(server.address(), FastRetries());

  absl::StatusOr<CompleteBatchResults> results =
      client.CompleteBatch(std::vector<CompleteBatchItem>(4));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 4u);
  ASSERT_TRUE((*results)[0].ok());
  EXPECT_EQ((*results)[0]->status(), v1::CompleteResponse::STALE_FENCE);
  EXPECT_EQ((*results)[1].status(),
            absl::InvalidArgumentError("items[1].fence: must be non-zero"));
  EXPECT_EQ((*results)[2].status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string((*results)[2].status().message()),
              StartsWith("items[2]: "));
  EXPECT_EQ((*results)[3].status().code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(std::string((*results)[3].status().message()), HasSubstr("huh"));
}

TEST(BatchClientTest, WrongItemCountFailsTheWholeCall) {
  BatchService service(
      [](const v1::BeginBatchRequest&, v1::BeginBatchResponse* resp) {
        resp->add_items()->mutable_response()->set_status(
            v1::BeginResponse::STARTED);
        return grpc::Status::OK;
      });
  InProcessServer server(&service);
  Client client(server.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results =
      client.BeginBatch(BeginItems("k", 2));
  EXPECT_EQ(results.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(results.status().message()),
              HasSubstr("1 items for 2"));
}

TEST(BatchClientTest, WholeCallErrorsOtherThanUnavailableAreNotRetried) {
  BatchService service(
      [](const v1::BeginBatchRequest&, v1::BeginBatchResponse*) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "items: must be 1..1000 items, got 0");
      });
  InProcessServer server(&service);
  Client client(server.address(), FastRetries());
  absl::StatusOr<BeginBatchResults> results = client.BeginBatch({});
  EXPECT_EQ(results.status(),
            absl::InvalidArgumentError("items: must be 1..1000 items, got 0"));
  EXPECT_EQ(service.begins().size(), 1u);
}

class BatchClientIntegrationTest
    : public SharedClientTest<BatchClientIntegrationTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

TEST_F(BatchClientIntegrationTest, BeginCompleteThenDuplicateWithItemError) {
  std::vector<BeginBatchItem> items = BeginItems(Key(), 5);
  items[2].key = "";
  absl::StatusOr<BeginBatchResults> started = client_->BeginBatch(items);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_EQ(started->size(), 5u);
  EXPECT_EQ((*started)[2].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string((*started)[2].status().message()),
              StartsWith("items[2].key: "));

  std::vector<CompleteBatchItem> completes;
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    ASSERT_TRUE((*started)[i].ok()) << (*started)[i].status();
    EXPECT_EQ((*started)[i]->status(), v1::BeginResponse::STARTED);
    CompleteBatchItem c;
    c.ns = items[i].ns;
    c.key = items[i].key;
    c.fence = (*started)[i]->fence();
    c.outcome = v1::SUCCESS;
    c.result = absl::StrCat("done-", i);
    completes.push_back(c);
  }
  absl::StatusOr<CompleteBatchResults> completed =
      client_->CompleteBatch(completes);
  ASSERT_TRUE(completed.ok()) << completed.status();
  ASSERT_EQ(completed->size(), 4u);
  for (const absl::StatusOr<v1::CompleteResponse>& c : *completed) {
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->status(), v1::CompleteResponse::OK);
  }

  items.erase(items.begin() + 2);
  for (BeginBatchItem& item : items) item.owner += "-later";
  absl::StatusOr<BeginBatchResults> replayed = client_->BeginBatch(items);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  ASSERT_EQ(replayed->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*replayed)[i].ok()) << (*replayed)[i].status();
    EXPECT_EQ((*replayed)[i]->status(), v1::BeginResponse::DUPLICATE);
    EXPECT_EQ((*replayed)[i]->fence(), completes[i].fence);
    EXPECT_EQ((*replayed)[i]->result(), completes[i].result);
  }
}

TEST_F(BatchClientIntegrationTest, EmptyBatchIsInvalidArgument) {
  absl::StatusOr<BeginBatchResults> begin = client_->BeginBatch({});
  EXPECT_EQ(begin.status(),
            absl::InvalidArgumentError("items: must be 1..1000 items, got 0"));
  absl::StatusOr<CompleteBatchResults> complete = client_->CompleteBatch({});
  EXPECT_EQ(complete.status(),
            absl::InvalidArgumentError("items: must be 1..1000 items, got 0"));
}

// The case the owner rule exists for: dedupd applied the batch but its answer
// was lost (here: a proxy drops it and says UNAVAILABLE). The client's retry
// re-sends the same owners, so every item re-enters with its fence instead of
// answering IN_USE to its own caller.
TEST_F(BatchClientIntegrationTest, RetryAfterLostAnswerReentersEveryItem) {
  std::unique_ptr<v1::Dedup::Stub> upstream =
      testing::NewStub(server().address());
  std::atomic<int> calls{0};
  BatchService proxy(
      [&](const v1::BeginBatchRequest& req, v1::BeginBatchResponse* resp) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
        const grpc::Status s = upstream->BeginBatch(&ctx, req, resp);
        if (++calls == 1) {
          resp->Clear();
          return Unavailable();
        }
        return s;
      });
  InProcessServer server(&proxy);
  Client client(server.address(), FastRetries());
  const std::vector<BeginBatchItem> items = BeginItems(Key(), 20);

  absl::StatusOr<BeginBatchResults> results = client.BeginBatch(items);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(calls.load(), 2);
  ASSERT_EQ(results->size(), 20u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*results)[i].ok()) << (*results)[i].status();
    EXPECT_EQ((*results)[i]->status(), v1::BeginResponse::STARTED) << i;
    EXPECT_EQ((*results)[i]->attempts(), 1u) << i;
    // The record is the one the lost attempt created, owned by this item.
    absl::StatusOr<v1::GetResponse> got =
        client_->Get(items[i].ns, items[i].key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->record().fence(), (*results)[i]->fence());
    EXPECT_EQ(got->record().owner(), items[i].owner);
  }
}

}  // namespace
}  // namespace dedup
