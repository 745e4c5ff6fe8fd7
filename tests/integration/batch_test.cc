// BeginBatch and CompleteBatch against the real dedupd: one answer per item in
// order, per-item errors that leave the other items alone, whole-call errors
// for a bad batch size, and the same exactly-one-owner guarantee as unary
// Begin when batch items collide with each other or with unary callers.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using v1::BeginBatchRequest;
using v1::BeginBatchResponse;
using v1::BeginResponse;
using v1::CompleteBatchRequest;
using v1::CompleteBatchResponse;
using v1::CompleteResponse;

constexpr int kMaxItems = 1000;  // The server's default --max_batch_items.
constexpr int64_t kDeadlineMs = 30000;

// Every test runs against both storage modes: with sync durability a shard
// group-commits the items it holds at once (possibly several on one key),
// while with none each is written as it comes.
struct NoDurability {
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};
struct SyncDurability {
  static std::vector<std::string> Flags() { return {"--durability=sync"}; }
};

template <typename Durability>
class BatchTest : public SharedServerTest<BatchTest<Durability>> {
 public:
  static std::vector<std::string> Flags() { return Durability::Flags(); }

 protected:
  grpc::Status BeginBatch(const BeginBatchRequest& req,
                          BeginBatchResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kDeadlineMs);
    return this->client().stub()->BeginBatch(&ctx, req, resp);
  }
  grpc::Status CompleteBatch(const CompleteBatchRequest& req,
                             CompleteBatchResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kDeadlineMs);
    return this->client().stub()->CompleteBatch(&ctx, req, resp);
  }

  // A batch call expected to succeed as a whole, with one answer per item.
  BeginBatchResponse BeginBatchOk(const BeginBatchRequest& req) {
    BeginBatchResponse resp;
    const grpc::Status s = BeginBatch(req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
    EXPECT_EQ(resp.items_size(), req.items_size());
    return resp;
  }
  CompleteBatchResponse CompleteBatchOk(const CompleteBatchRequest& req) {
    CompleteBatchResponse resp;
    const grpc::Status s = CompleteBatch(req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
    EXPECT_EQ(resp.items_size(), req.items_size());
    return resp;
  }

  // n items on keys TestKey("<i>"), each with its own owner "owner-<i>".
  BeginBatchRequest FreshBegins(int n) {
    BeginBatchRequest req;
    for (int i = 0; i < n; ++i) {
      *req.add_items() = this->client().BeginReq(TestKey(absl::StrCat(i)),
                                                 absl::StrCat("owner-", i));
    }
    return req;
  }

  v1::CompleteRequest CompleteReq(const std::string& key, uint64_t fence,
                                  const std::string& result) {
    v1::CompleteRequest req;
    req.set_namespace_(this->client().ns());
    req.set_key(key);
    req.set_fence(fence);
    req.set_outcome(v1::SUCCESS);
    req.set_result(result);
    return req;
  }
};

using Durabilities = ::testing::Types<NoDurability, SyncDurability>;
TYPED_TEST_SUITE(BatchTest, Durabilities);

// The full lifecycle at the maximum size, checking every item by position.
TYPED_TEST(BatchTest, MaxBatchStartsCompletesThenReplaysEveryItem) {
  const BeginBatchRequest begins = this->FreshBegins(kMaxItems);
  const BeginBatchResponse started = this->BeginBatchOk(begins);
  ASSERT_EQ(started.items_size(), kMaxItems);
  std::set<uint64_t> fences;
  for (int i = 0; i < kMaxItems; ++i) {
    const BeginBatchResponse::Item& item = started.items(i);
    ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
    EXPECT_EQ(item.response().status(), BeginResponse::STARTED) << i;
    EXPECT_GT(item.response().fence(), 0u) << i;
    EXPECT_EQ(item.response().attempts(), 1u) << i;
    fences.insert(item.response().fence());
  }
  // Fences are node-wide (group-wide with several groups), so fresh keys
  // never share one.
  if (!ShardedTestCluster()) {
    EXPECT_EQ(fences.size(), static_cast<size_t>(kMaxItems));
  }

  CompleteBatchRequest completes;
  for (int i = 0; i < kMaxItems; ++i) {
    *completes.add_items() = this->CompleteReq(
        begins.items(i).key(), started.items(i).response().fence(),
        absl::StrCat("result-", i));
  }
  const CompleteBatchResponse completed = this->CompleteBatchOk(completes);
  ASSERT_EQ(completed.items_size(), kMaxItems);
  for (int i = 0; i < kMaxItems; ++i) {
    const CompleteBatchResponse::Item& item = completed.items(i);
    ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
    EXPECT_EQ(item.response().status(), CompleteResponse::OK) << i;
    EXPECT_EQ(item.response().fence(), started.items(i).response().fence());
  }

  // New owners, so nothing here can be a re-entry: all are replays.
  BeginBatchRequest again = begins;
  for (v1::BeginRequest& item : *again.mutable_items()) {
    item.set_owner(item.owner() + "-later");
  }
  const BeginBatchResponse replayed = this->BeginBatchOk(again);
  ASSERT_EQ(replayed.items_size(), kMaxItems);
  for (int i = 0; i < kMaxItems; ++i) {
    const BeginBatchResponse::Item& item = replayed.items(i);
    ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
    EXPECT_EQ(item.response().status(), BeginResponse::DUPLICATE) << i;
    EXPECT_EQ(item.response().fence(), started.items(i).response().fence());
    EXPECT_EQ(item.response().outcome(), v1::SUCCESS) << i;
    EXPECT_EQ(item.response().result(), absl::StrCat("result-", i));
  }
}

// A re-sent batch (what a client retry does) keeps each item's owner, so the
// items re-enter with the fences they already hold.
TYPED_TEST(BatchTest, ResentBatchWithSameOwnersReentersEveryItem) {
  const BeginBatchRequest begins = this->FreshBegins(50);
  const BeginBatchResponse first = this->BeginBatchOk(begins);
  const BeginBatchResponse second = this->BeginBatchOk(begins);
  ASSERT_EQ(first.items_size(), 50);
  ASSERT_EQ(second.items_size(), 50);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(first.items(i).has_response()) << i;
    ASSERT_TRUE(second.items(i).has_response()) << i;
    EXPECT_EQ(first.items(i).response().status(), BeginResponse::STARTED);
    EXPECT_EQ(second.items(i).response().status(), BeginResponse::STARTED);
    EXPECT_EQ(second.items(i).response().fence(),
              first.items(i).response().fence());
  }
}

TYPED_TEST(BatchTest, InvalidItemsGetTheirOwnErrorsAndTheRestRuns) {
  BeginBatchRequest req = this->FreshBegins(8);
  req.mutable_items(3)->set_key("");
  req.mutable_items(5)->set_wait_ms(100);
  const BeginBatchResponse resp = this->BeginBatchOk(req);
  ASSERT_EQ(resp.items_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const BeginBatchResponse::Item& item = resp.items(i);
    if (i == 3 || i == 5) {
      ASSERT_TRUE(item.has_error()) << i;
      EXPECT_EQ(item.error().code(), grpc::StatusCode::INVALID_ARGUMENT) << i;
      const std::string field =
          i == 3 ? "items[3].key: " : "items[5].wait_ms: ";
      EXPECT_TRUE(absl::StartsWith(item.error().message(), field))
          << i << ": " << item.error().message();
    } else {
      ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
      EXPECT_EQ(item.response().status(), BeginResponse::STARTED) << i;
    }
  }
  // Nothing was done for the refused item: its key is still free.
  EXPECT_FALSE(this->client().Get(req.items(5).key()).found());

  // The same in CompleteBatch: a zero fence is refused for that item only.
  CompleteBatchRequest completes;
  for (int i = 0; i < 8; ++i) {
    if (i == 3 || i == 5) continue;
    *completes.add_items() = this->CompleteReq(
        req.items(i).key(), resp.items(i).response().fence(), "done");
  }
  completes.mutable_items(1)->set_fence(0);
  const CompleteBatchResponse completed = this->CompleteBatchOk(completes);
  ASSERT_EQ(completed.items_size(), 6);
  for (int i = 0; i < 6; ++i) {
    const CompleteBatchResponse::Item& item = completed.items(i);
    if (i == 1) {
      ASSERT_TRUE(item.has_error());
      EXPECT_EQ(item.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_TRUE(absl::StartsWith(item.error().message(), "items[1].fence: "))
          << item.error().message();
    } else {
      ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
      EXPECT_EQ(item.response().status(), CompleteResponse::OK) << i;
    }
  }
}

TYPED_TEST(BatchTest, EmptyOrOversizedBatchFailsTheWholeCall) {
  for (const int n : {0, kMaxItems + 1}) {
    const BeginBatchRequest begins = this->FreshBegins(n);
    BeginBatchResponse begin_resp;
    const grpc::Status b = this->BeginBatch(begins, &begin_resp);
    EXPECT_EQ(b.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << n;
    EXPECT_EQ(b.error_message(),
              absl::StrCat("items: must be 1..1000 items, got ", n));
    EXPECT_EQ(begin_resp.items_size(), 0);

    CompleteBatchRequest completes;
    for (int i = 0; i < n; ++i) {
      *completes.add_items() =
          this->CompleteReq(TestKey(absl::StrCat(i)), 1, "r");
    }
    CompleteBatchResponse complete_resp;
    const grpc::Status c = this->CompleteBatch(completes, &complete_resp);
    EXPECT_EQ(c.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << n;
    EXPECT_EQ(c.error_message(),
              absl::StrCat("items: must be 1..1000 items, got ", n));
  }
  // The oversized batch did nothing, not even for its first items.
  EXPECT_FALSE(this->client().Get(TestKey("0")).found());
}

TYPED_TEST(BatchTest, SameKeyTwiceWithDifferentOwnersStartsOnce) {
  const std::string key = TestKey("k");
  BeginBatchRequest req;
  *req.add_items() = this->client().BeginReq(key, "owner-a");
  *req.add_items() = this->client().BeginReq(key, "owner-b");
  // Anonymous items are never re-entrant either.
  *req.add_items() = this->client().BeginReq(key, "");
  const BeginBatchResponse resp = this->BeginBatchOk(req);
  ASSERT_EQ(resp.items_size(), 3);
  int started = 0, in_use = 0;
  uint64_t fence = 0;
  for (const BeginBatchResponse::Item& item : resp.items()) {
    ASSERT_TRUE(item.has_response()) << item.error().message();
    if (item.response().status() == BeginResponse::STARTED) {
      ++started;
      fence = item.response().fence();
    } else if (item.response().status() == BeginResponse::IN_USE) {
      ++in_use;
    }
  }
  EXPECT_EQ(started, 1);
  EXPECT_EQ(in_use, 2);
  // IN_USE names the execution that holds the key.
  for (const BeginBatchResponse::Item& item : resp.items()) {
    EXPECT_EQ(item.response().fence(), fence);
  }
}

TYPED_TEST(BatchTest, SameKeyTwiceWithSameOwnerReenters) {
  const std::string key = TestKey("k");
  BeginBatchRequest req;
  *req.add_items() = this->client().BeginReq(key, "owner-a");
  *req.add_items() = this->client().BeginReq(key, "owner-a");
  const BeginBatchResponse resp = this->BeginBatchOk(req);
  ASSERT_EQ(resp.items_size(), 2);
  for (const BeginBatchResponse::Item& item : resp.items()) {
    ASSERT_TRUE(item.has_response()) << item.error().message();
    EXPECT_EQ(item.response().status(), BeginResponse::STARTED);
    EXPECT_EQ(item.response().attempts(), 1u);
  }
  EXPECT_EQ(resp.items(0).response().fence(), resp.items(1).response().fence());
}

// A batch and unary Begins from other threads racing on the same fresh keys:
// every caller has its own owner, so each key has exactly one STARTED overall
// and every other answer is IN_USE with the winner's fence.
TYPED_TEST(BatchTest, BatchRacingUnaryBeginsStartsEachKeyOnce) {
  constexpr int kKeys = 200;
  constexpr int kUnaryThreads = 6;
  constexpr int kRounds = 3;

  struct Seen {
    int started = 0;
    int in_use = 0;
    int other = 0;
    std::set<uint64_t> fences;
  };
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::string> keys;
    for (int k = 0; k < kKeys; ++k) {
      keys.push_back(TestKey(absl::StrCat(round, "/", k)));
    }
    std::mutex mu;
    std::map<std::string, Seen> seen;  // Guarded by mu.
    std::vector<std::string> errors;   // Guarded by mu.
    auto record = [&](const std::string& key, const BeginResponse& r) {
      std::lock_guard<std::mutex> lock(mu);
      Seen& s = seen[key];
      if (r.status() == BeginResponse::STARTED) {
        ++s.started;
      } else if (r.status() == BeginResponse::IN_USE) {
        ++s.in_use;
      } else {
        ++s.other;
      }
      s.fences.insert(r.fence());
    };

    std::atomic<int> unary_answers{0};
    absl::Barrier barrier(kUnaryThreads + 1);
    std::vector<std::thread> threads;
    // The batch thread.
    threads.emplace_back([&] {
      std::unique_ptr<v1::Dedup::Stub> stub = NewStub(this->server().address());
      BeginBatchRequest req;
      for (int k = 0; k < kKeys; ++k) {
        *req.add_items() =
            this->client().BeginReq(keys[k], absl::StrCat("batch-", k));
      }
      barrier.Block();
      // Lands mid-stream: some keys are already claimed by unary callers,
      // the rest are contested while the batch runs.
      while (unary_answers.load() < kUnaryThreads * 20) SleepMs(1);
      grpc::ClientContext ctx;
      SetDeadline(&ctx, kDeadlineMs);
      BeginBatchResponse resp;
      const grpc::Status s = stub->BeginBatch(&ctx, req, &resp);
      if (!s.ok() || resp.items_size() != kKeys) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(absl::StrCat("BeginBatch: ", s.error_message(), " (",
                                      resp.items_size(), " items)"));
        return;
      }
      for (int k = 0; k < kKeys; ++k) {
        if (!resp.items(k).has_response()) {
          std::lock_guard<std::mutex> lock(mu);
          errors.push_back(absl::StrCat(
              "items[", k, "] refused: ", resp.items(k).error().message()));
          continue;
        }
        record(keys[k], resp.items(k).response());
      }
    });
    // Unary callers, each walking the keys from a different starting point
    // so that they meet the batch at different moments.
    for (int t = 0; t < kUnaryThreads; ++t) {
      threads.emplace_back([&, t] {
        std::unique_ptr<v1::Dedup::Stub> stub =
            NewStub(this->server().address());
        barrier.Block();
        for (int j = 0; j < kKeys; ++j) {
          const std::string& key =
              keys[(j + t * kKeys / kUnaryThreads) % kKeys];
          grpc::ClientContext ctx;
          SetDeadline(&ctx, kDeadlineMs);
          BeginResponse resp;
          const grpc::Status s = stub->Begin(
              &ctx, this->client().BeginReq(key, absl::StrCat("unary-", t)),
              &resp);
          ++unary_answers;  // Errors too, so the batch thread never hangs.
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            errors.push_back(absl::StrCat("Begin: ", s.error_message()));
            continue;
          }
          record(key, resp);
        }
      });
    }
    for (std::thread& t : threads) t.join();

    ASSERT_TRUE(errors.empty()) << errors.front();
    ASSERT_EQ(seen.size(), static_cast<size_t>(kKeys));
    for (const auto& [key, s] : seen) {
      EXPECT_EQ(s.started, 1) << key;
      EXPECT_EQ(s.in_use, kUnaryThreads) << key;
      EXPECT_EQ(s.other, 0) << key;
      EXPECT_EQ(s.fences.size(), 1u) << key << ": answers name several fences";
    }
  }
}

TYPED_TEST(BatchTest, CompleteBatchWithOneStaleFence) {
  constexpr int kItems = 10;
  constexpr int kStale = 4;
  const BeginBatchRequest begins = this->FreshBegins(kItems);
  const BeginBatchResponse started = this->BeginBatchOk(begins);
  ASSERT_EQ(started.items_size(), kItems);
  for (const BeginBatchResponse::Item& item : started.items()) {
    ASSERT_TRUE(item.has_response()) << item.error().message();
    ASSERT_EQ(item.response().status(), BeginResponse::STARTED);
  }
  // Someone else now holds item kStale's key under a higher fence.
  const std::string& stale_key = begins.items(kStale).key();
  const uint64_t stale_fence = started.items(kStale).response().fence();
  ASSERT_EQ(this->client().Release(stale_key, stale_fence).status(),
            v1::ReleaseResponse::OK);
  const BeginResponse current = this->client().Begin(stale_key, "someone-else");
  ASSERT_EQ(current.status(), BeginResponse::STARTED);
  ASSERT_GT(current.fence(), stale_fence);

  CompleteBatchRequest completes;
  for (int i = 0; i < kItems; ++i) {
    *completes.add_items() = this->CompleteReq(
        begins.items(i).key(), started.items(i).response().fence(),
        absl::StrCat("result-", i));
  }
  const CompleteBatchResponse completed = this->CompleteBatchOk(completes);
  ASSERT_EQ(completed.items_size(), kItems);
  for (int i = 0; i < kItems; ++i) {
    const CompleteBatchResponse::Item& item = completed.items(i);
    ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
    if (i == kStale) {
      EXPECT_EQ(item.response().status(), CompleteResponse::STALE_FENCE);
      EXPECT_EQ(item.response().fence(), current.fence());
    } else {
      EXPECT_EQ(item.response().status(), CompleteResponse::OK) << i;
    }
  }
  // The stale result was not recorded: the new owner still holds the key.
  const v1::GetResponse got = this->client().Get(stale_key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().state(), v1::IN_FLIGHT);
  EXPECT_EQ(got.record().fence(), current.fence());
}

}  // namespace
}  // namespace dedup::testing
