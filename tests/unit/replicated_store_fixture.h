// The fixture of the replicated store's tests on one node: a FakeConsensus
// the test drives step by step (the test's thread is the consensus thread), a
// fake clock and a real ReplicatedState on a temporary directory.
#ifndef DEDUP_TESTS_UNIT_REPLICATED_STORE_FIXTURE_H_
#define DEDUP_TESTS_UNIT_REPLICATED_STORE_FIXTURE_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "replication/replicated_store.h"
#include "storage/clock.h"
#include "storage/log_entry.h"
#include "storage/storage_key.h"
#include "tests/unit/fake_consensus.h"

namespace dedup::replicated_store_test {

using ::dedup::testing::FakeConsensus;

inline constexpr int64_t kStartMs = 1'700'000'000'000;
inline constexpr uint64_t kSelf = 1;
inline constexpr uint64_t kOther = 2;
inline constexpr char kOtherClient[] = "node2.example:7002";

// The answer a store callback got, if any.
template <typename T>
class Reply {
 public:
  StoreCallback<T> Callback() {
    return [got = got_](absl::StatusOr<T> value) {
      got->emplace(std::move(value));
    };
  }
  bool answered() const { return got_->has_value(); }
  const absl::StatusOr<T>& get() const { return **got_; }
  absl::Status status() const {
    return answered() ? get().status()
                      : absl::InternalError("not answered (yet)");
  }

 private:
  std::shared_ptr<std::optional<absl::StatusOr<T>>> got_ =
      std::make_shared<std::optional<absl::StatusOr<T>>>();
};

// The outcome a membership call's `done` got, if any.
class DoneReply {
 public:
  ReplicatedStore::Done Callback() {
    return
        [got = got_](absl::Status status) { got->emplace(std::move(status)); };
  }
  bool answered() const { return got_->has_value(); }
  absl::Status status() const {
    return answered() ? **got_ : absl::InternalError("not answered (yet)");
  }

 private:
  std::shared_ptr<std::optional<absl::Status>> got_ =
      std::make_shared<std::optional<absl::Status>>();
};

inline BeginParams Owner(const std::string& owner, int64_t lease_ms = 10'000) {
  BeginParams params;
  params.owner = owner;
  params.args_hash = "h";
  params.lease_ms = lease_ms;
  params.ttl_s = 3600;
  return params;
}

inline CompleteParams Result(uint64_t fence, std::string result) {
  CompleteParams params;
  params.fence = fence;
  params.result = std::move(result);
  return params;
}

inline std::string LeaderPayload(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kLeaderAddressPayload);
  return payload.has_value() ? std::string(*payload) : "";
}

inline bool OutcomeUnknown(const absl::Status& status) {
  return absl::IsAborted(status) &&
         status.GetPayload(kOutcomeUnknownPayload).has_value();
}

class ReplicatedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "dedup-repl-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    if (store_ != nullptr) {
      EXPECT_TRUE(store_->Close().ok());
    }
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Options of node kSelf in a group with kOther; tests tune the limits.
  ReplicatedStoreOptions Options() {
    ReplicatedStoreOptions options;
    options.state.path = dir_ + "/state";
    options.state.memory_budget_bytes = 16 << 20;
    options.node_id = kSelf;
    options.log_dir = dir_ + "/raft";
    options.nodes = {{kSelf, "127.0.0.1:7101", "node1.example:7001"},
                     {kOther, "127.0.0.1:7102", kOtherClient}};
    options.clock = &clock_;
    options.consensus = [this](StateMachine* machine) {
      auto fake = std::make_unique<FakeConsensus>(machine, kSelf);
      fake_ = fake.get();
      return absl::StatusOr<std::unique_ptr<Consensus>>(std::move(fake));
    };
    return options;
  }

  // Opens the store, which then leads.
  void Open(ReplicatedStoreOptions options) {
    absl::StatusOr<std::unique_ptr<ReplicatedStore>> store =
        ReplicatedStore::Open(std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_NE(fake_, nullptr);
    fake_->BecomeLeader();
  }

  // The entries waiting for a commit, decoded.
  std::vector<LogEntry> Pending() const {
    std::vector<LogEntry> entries;
    for (const std::string& bytes : fake_->PendingEntries()) {
      absl::StatusOr<LogEntry> entry = DecodeLogEntry(bytes);
      EXPECT_TRUE(entry.ok()) << entry.status();
      if (entry.ok()) entries.push_back(*std::move(entry));
    }
    return entries;
  }

  // Operations per pending entry.
  std::vector<size_t> PendingSizes() const {
    std::vector<size_t> sizes;
    for (const LogEntry& entry : Pending()) sizes.push_back(entry.ops.size());
    return sizes;
  }

  // Commits everything proposed, and what that leads to, until quiet.
  void Settle() {
    fake_->RunPosted();
    while (fake_->pending() > 0) {
      ASSERT_TRUE(fake_->CommitAll().ok());
      fake_->RunPosted();
    }
  }

  Reply<BeginResult> Begin(const std::string& key, BeginParams params,
                           int64_t wait_ms = 0) {
    Reply<BeginResult> reply;
    store_->Begin("ns", key, std::move(params), wait_ms, reply.Callback());
    return reply;
  }

  Reply<std::optional<Record>> Get(const std::string& key) {
    Reply<std::optional<Record>> reply;
    store_->Get("ns", key, reply.Callback());
    return reply;
  }

  Reply<FencedDecision> Complete(const std::string& key, uint64_t fence,
                                 std::string result = "r") {
    Reply<FencedDecision> reply;
    store_->Complete("ns", key, Result(fence, std::move(result)),
                     reply.Callback());
    return reply;
  }

  // A Begin by "holder" that starts, settled; its fence.
  uint64_t Hold(const std::string& key, int64_t lease_ms = 10'000) {
    Reply<BeginResult> held = Begin(key, Owner("holder", lease_ms));
    Settle();
    EXPECT_TRUE(held.status().ok()) << held.status();
    if (!held.answered() || !held.get().ok()) return 0;
    EXPECT_EQ(held.get()->decision.status, BeginStatus::kStarted);
    return held.get()->decision.record.fence;
  }

  // A Begin by "waiter" that waits up to `wait_ms` and finds `key` in use:
  // parked, unanswered.
  Reply<BeginResult> Park(const std::string& key, int64_t wait_ms = 5'000) {
    Reply<BeginResult> waiter = Begin(key, Owner("waiter"), wait_ms);
    Settle();
    EXPECT_FALSE(waiter.answered()) << waiter.status();
    EXPECT_EQ(store_->Stats().waiting_begins, 1u);
    return waiter;
  }

  std::string dir_;
  FakeClock clock_{kStartMs};
  FakeConsensus* fake_ = nullptr;  // owned by store_
  std::unique_ptr<ReplicatedStore> store_;
};

}  // namespace dedup::replicated_store_test

#endif  // DEDUP_TESTS_UNIT_REPLICATED_STORE_FIXTURE_H_
