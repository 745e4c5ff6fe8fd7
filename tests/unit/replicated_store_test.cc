// The replicated store's flow on one node (replicated_store_fixture.h):
// batching, the in-flight cap, outcome-unknown answers, membership,
// replicated time and Close.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/replicated_store_fixture.h"

namespace dedup::replicated_store_test {
namespace {

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

// A flood is proposed in entries holding at most max_inflight_ops between
// them (each at least its even share), so that one commit never hands the
// replicas more than that to apply in one pass.
TEST_F(ReplicatedStoreTest, InflightOpsBoundHoldsProposalsUntilRoom) {
  ReplicatedStoreOptions options = Options();
  options.max_inflight_entries = 4;
  options.max_inflight_ops = 8;
  Open(std::move(options));
  std::vector<Reply<std::optional<Record>>> gets;
  for (int i = 0; i < 5; ++i) gets.push_back(Get(absl::StrCat("k", i)));
  fake_->RunPosted();
  // Five fit under the bound: one entry, room for 3 more.
  ASSERT_EQ(PendingSizes(), (std::vector<size_t>{5}));
  for (int i = 5; i < 20; ++i) gets.push_back(Get(absl::StrCat("k", i)));
  fake_->RunPosted();
  // Room 3: one entry of 3 (not less than the share of 2), then the bound
  // is reached and the other 12 wait, though entries may still be added.
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{5, 3}));
  ASSERT_TRUE(fake_->Commit(1).ok());
  fake_->RunPosted();
  // 5 done: room 5, in one entry.
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{3, 5}));
  ASSERT_TRUE(fake_->Commit(1).ok());
  fake_->RunPosted();
  // 3 done: in flight 5, room 3, and the share (2) is less.
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{5, 3}));
  Settle();
  for (const auto& get : gets) EXPECT_TRUE(get.status().ok()) << get.status();
}

// An entry larger than the room left (its even share) may pass the bound,
// so that a nearly full pipeline does not crawl in one-operation entries.
TEST_F(ReplicatedStoreTest, InflightOpsBoundGivesEachEntryItsShare) {
  ReplicatedStoreOptions options = Options();
  options.max_inflight_entries = 4;
  options.max_inflight_ops = 8;
  options.max_entry_ops = 7;
  Open(std::move(options));
  std::vector<Reply<std::optional<Record>>> gets;
  for (int i = 0; i < 12; ++i) gets.push_back(Get(absl::StrCat("k", i)));
  fake_->RunPosted();
  // 7 (max_entry_ops), then room 1 but a share of 2: 9 in flight.
  EXPECT_EQ(PendingSizes(), (std::vector<size_t>{7, 2}));
  Settle();
  for (const auto& get : gets) EXPECT_TRUE(get.status().ok()) << get.status();
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

// The meta group's map goes through the log like any write: one proposer
// wins a race on the same epoch, the other is told to read again.
TEST_F(ReplicatedStoreTest, ProposeShardMapIsACompareAndSetThroughTheLog) {
  Open(Options());
  absl::StatusOr<ReplicatedState::StoredShardMap> before =
      store_->StoredShardMap();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->epoch, 0u);
  Reply<bool> first;
  Reply<bool> racing;
  store_->ProposeShardMap(0, 1, "map-1", first.Callback());
  store_->ProposeShardMap(0, 1, "map-1b", racing.Callback());
  fake_->RunPosted();
  const std::vector<LogEntry> entries = Pending();
  ASSERT_FALSE(entries.empty());
  ASSERT_EQ(TypeOf(entries[0].ops[0]), OpType::kSetShardMap);
  EXPECT_FALSE(first.answered()) << "answered before it was applied";
  Settle();
  ASSERT_TRUE(first.answered());
  ASSERT_TRUE(first.get().ok()) << first.status();
  EXPECT_TRUE(*first.get());
  ASSERT_TRUE(racing.answered());
  EXPECT_TRUE(absl::IsFailedPrecondition(racing.status())) << racing.status();
  absl::StatusOr<ReplicatedState::StoredShardMap> after =
      store_->StoredShardMap();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->epoch, 1u);
  EXPECT_EQ(after->map, "map-1");
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

}  // namespace
}  // namespace dedup::replicated_store_test
