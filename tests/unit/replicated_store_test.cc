// The replicated store's flow on one node, on a FakeConsensus the test
// drives step by step (the test's thread is the consensus thread) and a
// fake clock: batching, the in-flight cap, outcome-unknown answers, parked
// Begins, membership, replicated time and Close. The state is a real
// ReplicatedState on a temporary directory.
#include "replication/replicated_store.h"

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
#include "storage/clock.h"
#include "storage/log_entry.h"
#include "storage/storage_key.h"
#include "tests/unit/fake_consensus.h"

namespace dedup {
namespace {

using ::dedup::testing::FakeConsensus;

constexpr int64_t kStartMs = 1'700'000'000'000;
constexpr uint64_t kSelf = 1;
constexpr uint64_t kOther = 2;
constexpr char kOtherClient[] = "node2.example:7002";

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

BeginParams Owner(const std::string& owner, int64_t lease_ms = 10'000) {
  BeginParams params;
  params.owner = owner;
  params.args_hash = "h";
  params.lease_ms = lease_ms;
  params.ttl_s = 3600;
  return params;
}

CompleteParams Result(uint64_t fence, std::string result) {
  CompleteParams params;
  params.fence = fence;
  params.result = std::move(result);
  return params;
}

std::string LeaderPayload(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kLeaderAddressPayload);
  return payload.has_value() ? std::string(*payload) : "";
}

bool OutcomeUnknown(const absl::Status& status) {
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

TEST_F(ReplicatedStoreTest, MaxEntryOpsSplitsQueuedOperations) {
  ReplicatedStoreOptions options = Options();
  options.max_entry_ops = 3;
  options.max_inflight_entries = 100;
  Open(std::move(options));
  std::vector<Reply<std::optional<Record>>> gets;
  for (int i = 0; i < 7; ++i) gets.push_back(Get(absl::StrCat("k", i)));
  fake_->RunPosted();
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{3, 3, 1}));
  // In submission order, stamped by this node.
  const std::vector<LogEntry> entries = Pending();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(*KeyOf(entries[1].ops[0]), EncodeStorageKey("ns", "k3"));
  EXPECT_EQ(*KeyOf(entries[2].ops[0]), EncodeStorageKey("ns", "k6"));
  EXPECT_EQ(entries[0].proposer, kSelf);
  EXPECT_LT(entries[0].sequence, entries[1].sequence);
  Settle();
  for (const auto& get : gets) {
    ASSERT_TRUE(get.status().ok()) << get.status();
    EXPECT_FALSE(get.get()->has_value());
  }
}

TEST_F(ReplicatedStoreTest, MaxEntryBytesSplitsQueuedOperations) {
  ReplicatedStoreOptions options = Options();
  options.max_entry_bytes = 2'500;
  options.max_inflight_entries = 100;
  Open(std::move(options));
  // Two 1000-byte results fit an entry, three do not; a result larger than
  // the limit goes alone rather than never.
  std::vector<Reply<FencedDecision>> completes;
  for (size_t size : {1'000, 1'000, 1'000, 5'000, 1'000}) {
    completes.push_back(Complete(absl::StrCat("k", completes.size()), 1,
                                 std::string(size, 'x')));
  }
  fake_->RunPosted();
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{2, 1, 1, 1}));
  Settle();
  for (const auto& complete : completes) {
    ASSERT_TRUE(complete.status().ok()) << complete.status();
    EXPECT_EQ(complete.get()->status, FencedStatus::kNotFound);
  }
}

TEST_F(ReplicatedStoreTest, InflightCapHoldsProposalsAndGathersTheQueue) {
  ReplicatedStoreOptions options = Options();
  options.max_inflight_entries = 1;
  Open(std::move(options));
  Reply<std::optional<Record>> first = Get("a");
  fake_->RunPosted();
  ASSERT_EQ(PendingSizes(), (std::vector<size_t>{1}));
  std::vector<Reply<std::optional<Record>>> later = {Get("b"), Get("c"),
                                                     Get("d")};
  fake_->RunPosted();
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{1}))
      << "a second entry was proposed while one was in flight";
  ASSERT_TRUE(fake_->Commit(1).ok());
  EXPECT_TRUE(first.status().ok()) << first.status();
  EXPECT_FALSE(later[0].answered());
  fake_->RunPosted();
  // Everything that waited, in one entry.
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{3}));
  Settle();
  for (const auto& get : later) EXPECT_TRUE(get.status().ok()) << get.status();
}

TEST_F(ReplicatedStoreTest, RefusesBeyondMaxQueued) {
  ReplicatedStoreOptions options = Options();
  options.max_queued = 3;
  Open(std::move(options));
  std::vector<Reply<std::optional<Record>>> queued = {Get("a"), Get("b"),
                                                      Get("c")};
  Reply<std::optional<Record>> refused = Get("d");
  ASSERT_TRUE(refused.answered());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  for (const auto& get : queued) EXPECT_FALSE(get.answered());
  Settle();
  for (const auto& get : queued) EXPECT_TRUE(get.status().ok()) << get.status();
  // Room again once the queue drained.
  Reply<std::optional<Record>> again = Get("e");
  Settle();
  EXPECT_TRUE(again.status().ok()) << again.status();
}

TEST_F(ReplicatedStoreTest, SteppingDownLeavesProposedOutcomesUnknown) {
  ReplicatedStoreOptions options = Options();
  options.max_inflight_entries = 1;
  Open(std::move(options));
  Reply<BeginResult> proposed = Begin("a", Owner("o"));
  fake_->RunPosted();
  ASSERT_EQ(fake_->pending(), 1u);
  Reply<BeginResult> queued = Begin("b", Owner("o"));
  fake_->RunPosted();
  ASSERT_EQ(fake_->pending(), 1u);

  fake_->LoseLeadership(kOther);
  fake_->RunPosted();
  ASSERT_TRUE(proposed.answered());
  EXPECT_TRUE(OutcomeUnknown(proposed.status())) << proposed.status();
  // Never proposed: nothing happened, and the leader is named.
  ASSERT_TRUE(queued.answered());
  EXPECT_TRUE(absl::IsUnavailable(queued.status())) << queued.status();
  EXPECT_EQ(LeaderPayload(queued.status()), kOtherClient);
  EXPECT_EQ(fake_->pending(), 0u);
  EXPECT_EQ(store_->GetClusterStatus().counters.unknown_outcomes, 1u);
}

TEST_F(ReplicatedStoreTest, FollowerRefusesAtOnceNamingTheLeader) {
  Open(Options());
  fake_->LoseLeadership(kOther);
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  ASSERT_TRUE(begin.answered());
  EXPECT_TRUE(absl::IsUnavailable(begin.status())) << begin.status();
  EXPECT_EQ(LeaderPayload(begin.status()), kOtherClient);
  EXPECT_TRUE(absl::IsUnavailable(store_->CheckServing()));
  fake_->RunPosted();
  EXPECT_EQ(fake_->pending(), 0u);
}

TEST_F(ReplicatedStoreTest, ParkedBeginIsWokenByComplete) {
  Open(Options());
  const uint64_t fence = Hold("k");
  Reply<BeginResult> waiter = Park("k");
  Reply<FencedDecision> complete = Complete("k", fence, "done");
  Settle();
  ASSERT_TRUE(complete.status().ok()) << complete.status();
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kDuplicate);
  EXPECT_EQ(waiter.get()->decision.record.result, "done");
  EXPECT_TRUE(waiter.get()->waited);
  EXPECT_EQ(store_->Stats().waiting_begins, 0u);
}

TEST_F(ReplicatedStoreTest, ParkedBeginIsWokenByRelease) {
  Open(Options());
  const uint64_t fence = Hold("k");
  Reply<BeginResult> waiter = Park("k");
  Reply<FencedDecision> release;
  store_->Release("ns", "k", fence, release.Callback());
  Settle();
  ASSERT_TRUE(release.status().ok()) << release.status();
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kStarted);
  EXPECT_EQ(waiter.get()->decision.record.owner, "waiter");
  EXPECT_TRUE(waiter.get()->waited);
}

TEST_F(ReplicatedStoreTest, ParkedBeginIsAnsweredWhenItsWaitRunsOut) {
  Open(Options());
  Hold("k");
  Reply<BeginResult> waiter = Park("k", /*wait_ms=*/2'000);
  clock_.Advance(1'999);
  fake_->Tick();
  fake_->RunPosted();
  EXPECT_EQ(fake_->pending(), 0u) << "proposed again before its wait ran out";
  clock_.Advance(1);
  fake_->Tick();
  Settle();
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kInUse);
  EXPECT_TRUE(waiter.get()->waited);
  EXPECT_EQ(store_->Stats().waiting_begins, 0u);
}

TEST_F(ReplicatedStoreTest, ParkedBeginTakesOverWhenTheLeaseRunsOut) {
  Open(Options());
  Hold("k", /*lease_ms=*/1'000);
  Reply<BeginResult> waiter = Park("k", /*wait_ms=*/10'000);
  clock_.Advance(1'000);
  fake_->Tick();
  Settle();
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kStarted);
  EXPECT_TRUE(waiter.get()->decision.takeover);
  EXPECT_TRUE(waiter.get()->waited);
}

TEST_F(ReplicatedStoreTest, SteppingDownAnswersParkedBegins) {
  Open(Options());
  Hold("k", /*lease_ms=*/1'000);
  Reply<BeginResult> waiter = Park("k");
  clock_.Advance(400);
  fake_->LoseLeadership(kOther);
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kInUse);
  EXPECT_EQ(waiter.get()->decision.retry_after_ms, 600);
  EXPECT_TRUE(waiter.get()->waited);
  EXPECT_EQ(store_->Stats().waiting_begins, 0u);
}

TEST_F(ReplicatedStoreTest, DrainWaitersAnswersParkedBeginsAndParksNoMore) {
  Open(Options());
  Hold("k");
  Reply<BeginResult> waiter = Park("k");
  store_->DrainWaiters();
  fake_->RunPosted();
  ASSERT_TRUE(waiter.status().ok()) << waiter.status();
  EXPECT_EQ(waiter.get()->decision.status, BeginStatus::kInUse);
  // A later waiting Begin is answered at once.
  Reply<BeginResult> late = Begin("k", Owner("late"), /*wait_ms=*/5'000);
  Settle();
  ASSERT_TRUE(late.status().ok()) << late.status();
  EXPECT_EQ(late.get()->decision.status, BeginStatus::kInUse);
  EXPECT_FALSE(late.get()->waited);
}

TEST_F(ReplicatedStoreTest, AddMemberRecordsItsClientAddressFirst) {
  Open(Options());
  DoneReply added;
  store_->AddMember({3, "127.0.0.1:7103", "node3.example:7003"},
                    added.Callback());
  fake_->RunPosted();
  const std::vector<LogEntry> entries = Pending();
  ASSERT_EQ(entries.size(), 1u);
  ASSERT_EQ(entries[0].ops.size(), 1u);
  ASSERT_EQ(TypeOf(entries[0].ops[0]), OpType::kSetMember);
  EXPECT_EQ(std::get<LogSetMember>(entries[0].ops[0]).member_id, 3u);
  EXPECT_EQ(std::get<LogSetMember>(entries[0].ops[0]).client_address,
            "node3.example:7003");
  EXPECT_TRUE(fake_->changes().empty()) << "added before it was recorded";

  Settle();
  ASSERT_EQ(fake_->changes().size(), 1u);
  EXPECT_EQ(fake_->changes()[0].kind, FakeConsensus::Change::Kind::kAdd);
  EXPECT_EQ(fake_->changes()[0].id, 3u);
  EXPECT_EQ(fake_->changes()[0].raft_address, "127.0.0.1:7103");
  EXPECT_FALSE(added.answered()) << "answered before the engine finished";
  fake_->FinishChange(absl::OkStatus());
  EXPECT_TRUE(added.status().ok()) << added.status();
  bool known = false;
  for (const ClusterNode& node : store_->GetClusterStatus().nodes) {
    if (node.id == 3) known = node.client_address == "node3.example:7003";
  }
  EXPECT_TRUE(known);
}

TEST_F(ReplicatedStoreTest, MembershipCallsReachTheEngineAndReportFailures) {
  Open(Options());
  DoneReply added;
  store_->AddMember({3, "127.0.0.1:7103", ""}, added.Callback());
  DoneReply removed;
  store_->RemoveMember(kOther, removed.Callback());
  DoneReply transferred;
  store_->TransferLeadership(kOther, transferred.Callback());
  fake_->RunPosted();
  EXPECT_EQ(fake_->pending(), 0u) << "no address to record, no entry";
  const std::vector<FakeConsensus::Change> changes = fake_->changes();
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].kind, FakeConsensus::Change::Kind::kAdd);
  EXPECT_EQ(changes[1].kind, FakeConsensus::Change::Kind::kRemove);
  EXPECT_EQ(changes[1].id, kOther);
  EXPECT_EQ(changes[2].kind, FakeConsensus::Change::Kind::kTransfer);
  EXPECT_EQ(changes[2].id, kOther);
  fake_->FinishChange(absl::OkStatus());
  fake_->FinishChange(absl::InternalError("remove failed"));
  fake_->FinishChange(absl::DeadlineExceededError("not transferred"));
  EXPECT_TRUE(added.status().ok()) << added.status();
  EXPECT_TRUE(absl::IsInternal(removed.status())) << removed.status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(transferred.status()))
      << transferred.status();

  // Refused by the engine at once (not the leader).
  fake_->LoseLeadership(kOther);
  DoneReply refused;
  store_->RemoveMember(kOther, refused.Callback());
  fake_->RunPosted();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  // Recording the address fails before the engine is asked.
  DoneReply unrecorded;
  store_->AddMember({4, "127.0.0.1:7104", "node4.example:7004"},
                    unrecorded.Callback());
  fake_->RunPosted();
  EXPECT_TRUE(absl::IsUnavailable(unrecorded.status())) << unrecorded.status();
  EXPECT_EQ(fake_->changes().size(), 3u);
}

TEST_F(ReplicatedStoreTest, EntriesAreStampedWithTimeThatNeverGoesBack) {
  Open(Options());
  Reply<std::optional<Record>> first = Get("a");
  fake_->RunPosted();
  ASSERT_EQ(Pending().size(), 1u);
  EXPECT_EQ(Pending()[0].now_ms, kStartMs);
  Settle();
  clock_.Set(kStartMs - 5'000);
  Reply<std::optional<Record>> behind = Get("a");
  fake_->RunPosted();
  ASSERT_EQ(Pending().size(), 1u);
  EXPECT_EQ(Pending()[0].now_ms, kStartMs) << "stamped behind replicated time";
  Settle();
  clock_.Set(kStartMs + 1'000);
  Reply<std::optional<Record>> ahead = Get("a");
  fake_->RunPosted();
  ASSERT_EQ(Pending().size(), 1u);
  EXPECT_EQ(Pending()[0].now_ms, kStartMs + 1'000);
  Settle();
  EXPECT_EQ(store_->GetClusterStatus().replicated_now_ms, kStartMs + 1'000);
}

TEST_F(ReplicatedStoreTest, CloseAnswersEveryCaller) {
  ReplicatedStoreOptions options = Options();
  options.max_inflight_entries = 1;
  Open(std::move(options));
  Hold("k");
  Reply<BeginResult> parked = Park("k");
  Reply<std::optional<Record>> proposed = Get("a");
  fake_->RunPosted();
  ASSERT_EQ(fake_->pending(), 1u);
  Reply<std::optional<Record>> queued = Get("b");
  fake_->RunPosted();
  ASSERT_FALSE(queued.answered());

  ASSERT_TRUE(store_->Close().ok());
  ASSERT_TRUE(parked.status().ok()) << parked.status();
  EXPECT_EQ(parked.get()->decision.status, BeginStatus::kInUse);
  EXPECT_TRUE(OutcomeUnknown(proposed.status())) << proposed.status();
  EXPECT_TRUE(absl::IsUnavailable(queued.status())) << queued.status();
  EXPECT_FALSE(queued.status().GetPayload(kOutcomeUnknownPayload).has_value());
  Reply<std::optional<Record>> after = Get("c");
  EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();
}

// A follower applies the same entries as the leader; only the leader,
// whose callers wait, builds answers, and it copies a DUPLICATE's result
// only while the batch's budget lasts.
class ReadAmplificationTest : public ReplicatedStoreTest {
 protected:
  void OpenFollower() {
    ReplicatedStoreOptions options = Options();
    options.state.path = dir_ + "/follower";
    options.log_dir = dir_ + "/follower-raft";
    options.node_id = kOther;
    options.consensus = [this](StateMachine* machine) {
      auto fake = std::make_unique<FakeConsensus>(machine, kOther);
      follower_fake_ = fake.get();
      return absl::StatusOr<std::unique_ptr<Consensus>>(std::move(fake));
    };
    absl::StatusOr<std::unique_ptr<ReplicatedStore>> store =
        ReplicatedStore::Open(std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    follower_ = *std::move(store);
  }

  void TearDown() override {
    if (follower_ != nullptr) {
      EXPECT_TRUE(follower_->Close().ok());
    }
    follower_.reset();
    ReplicatedStoreTest::TearDown();
  }

  // Settle, with the follower applying every entry before the leader does.
  void SettleBoth() {
    fake_->RunPosted();
    while (fake_->pending() > 0) {
      for (const std::string& entry : fake_->PendingEntries()) {
        ASSERT_TRUE(follower_fake_->Follow(entry).ok());
      }
      ASSERT_TRUE(fake_->CommitAll().ok());
      fake_->RunPosted();
    }
  }

  FakeConsensus* follower_fake_ = nullptr;  // owned by follower_
  std::unique_ptr<ReplicatedStore> follower_;
};

TEST_F(ReadAmplificationTest, OnlyTheLeaderCopiesResultsAndWithinTheBudget) {
  Open(Options());
  OpenFollower();
  const std::string large(1 << 20, 'r');
  Reply<BeginResult> begun = Begin("k", Owner("o"));
  SettleBoth();
  ASSERT_TRUE(begun.status().ok()) << begun.status();
  Reply<FencedDecision> completed =
      Complete("k", begun.get()->decision.record.fence, large);
  SettleBoth();
  ASSERT_TRUE(completed.status().ok()) << completed.status();

  // One entry: 1,000 reads of the large result in a batch with room for
  // three, a Begin and a Get of a fresh key (the Get sees the Begin), a Get
  // of the large one, and Completes again (idempotent, then not).
  ResultBudget budget(3 << 20);
  std::vector<Reply<BeginResult>> reads(1000);
  std::vector<Store::BeginCall> calls;
  for (Reply<BeginResult>& read : reads) {
    calls.push_back({"ns", "k", Owner("x"), read.Callback(), &budget});
  }
  Reply<BeginResult> fresh;
  calls.push_back({"ns", "fresh", Owner("o"), fresh.Callback(), &budget});
  store_->BeginMany(std::move(calls));
  Reply<std::optional<Record>> fresh_get = Get("fresh");
  Reply<std::optional<Record>> large_get = Get("k");
  Reply<FencedDecision> again =
      Complete("k", begun.get()->decision.record.fence, large);
  Reply<FencedDecision> other =
      Complete("k", begun.get()->decision.record.fence, "other");
  Reply<FencedDecision> same_size = Complete(
      "k", begun.get()->decision.record.fence, std::string(large.size(), 'x'));
  fake_->RunPosted();
  ASSERT_EQ(Pending().size(), 1u);
  SettleBoth();

  for (size_t i = 0; i < reads.size(); ++i) {
    if (i < 3) {
      ASSERT_TRUE(reads[i].status().ok()) << i << ": " << reads[i].status();
      EXPECT_EQ(reads[i].get()->decision.status, BeginStatus::kDuplicate);
      EXPECT_EQ(reads[i].get()->decision.record.result, large);
    } else {
      ASSERT_TRUE(absl::IsUnavailable(reads[i].status()))
          << i << ": " << reads[i].status();
      EXPECT_TRUE(
          reads[i].status().GetPayload(kResultBudgetPayload).has_value());
    }
  }
  ASSERT_TRUE(fresh.status().ok()) << fresh.status();
  EXPECT_EQ(fresh.get()->decision.status, BeginStatus::kStarted);
  ASSERT_TRUE(fresh_get.status().ok()) << fresh_get.status();
  ASSERT_TRUE(fresh_get.get()->has_value());
  EXPECT_EQ((*fresh_get.get())->fence, fresh.get()->decision.record.fence);
  ASSERT_TRUE(large_get.status().ok()) << large_get.status();
  ASSERT_TRUE(large_get.get()->has_value());
  EXPECT_EQ((*large_get.get())->result, large);
  ASSERT_TRUE(again.status().ok()) << again.status();
  EXPECT_EQ(again.get()->status, FencedStatus::kOk);
  ASSERT_TRUE(other.status().ok()) << other.status();
  EXPECT_EQ(other.get()->status, FencedStatus::kAlreadyCompleted);
  ASSERT_TRUE(same_size.status().ok()) << same_size.status();
  EXPECT_EQ(same_size.get()->status, FencedStatus::kAlreadyCompleted);

  // The leader copied three results for the batch and one for the Get; the
  // follower, which answers nobody, none.
  EXPECT_EQ(store_->GetClusterStatus().result_bytes_answered, 4 * large.size());
  EXPECT_EQ(follower_->GetClusterStatus().result_bytes_answered, 0u);
  absl::StatusOr<StateDigest> leader_digest = store_->Digest();
  absl::StatusOr<StateDigest> follower_digest = follower_->Digest();
  ASSERT_TRUE(leader_digest.ok() && follower_digest.ok());
  EXPECT_EQ(leader_digest->hash, follower_digest->hash);
  EXPECT_EQ(leader_digest->applied_index, follower_digest->applied_index);
}

}  // namespace
}  // namespace dedup
