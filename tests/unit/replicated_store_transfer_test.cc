// Leadership transfers and elections on one node's replicated store, with a
// FakeConsensus driven step by step: operations that arrive meanwhile are
// held, then proposed by a leader or refused naming the new one; a proposal
// cut off by the transfer is answered from this node's apply of its entry;
// every hold ends within max_transfer_hold_ms.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/replicated_store_fixture.h"

namespace dedup::replicated_store_test {
namespace {

constexpr int64_t kHoldMs = 2000;

class TransferTest : public ReplicatedStoreTest {
 protected:
  void SetUp() override {
    ReplicatedStoreTest::SetUp();
    ReplicatedStoreOptions options = Options();
    options.max_transfer_hold_ms = kHoldMs;
    Open(std::move(options));
  }

  // Asks the store to hand leadership to kOther; the engine has the call.
  DoneReply StartTransfer() {
    DoneReply transferred;
    store_->TransferLeadership(kOther, transferred.Callback());
    fake_->RunPosted();
    EXPECT_EQ(fake_->pending_changes(), 1u);
    return transferred;
  }
};

TEST_F(TransferTest, HeldCallsNameTheNewLeaderOnceItIsKnown) {
  DoneReply transferred = StartTransfer();
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  EXPECT_TRUE(store_->CheckServing().ok());
  EXPECT_FALSE(begin.answered());
  EXPECT_EQ(fake_->pending(), 0u);

  // Deposed by the target's election, whose winner is not known yet (the
  // engine ended the transfer): still held.
  fake_->LoseLeadership(0);
  fake_->RunPosted();
  EXPECT_TRUE(transferred.answered());
  EXPECT_FALSE(begin.answered());
  Reply<BeginResult> later = Begin("b", Owner("o"));
  fake_->RunPosted();
  EXPECT_FALSE(later.answered());

  fake_->LoseLeadership(kOther);
  fake_->RunPosted();
  for (const Reply<BeginResult>* reply : {&begin, &later}) {
    ASSERT_TRUE(reply->answered());
    EXPECT_TRUE(absl::IsUnavailable(reply->status())) << reply->status();
    EXPECT_EQ(LeaderPayload(reply->status()), kOtherClient);
  }
  EXPECT_EQ(fake_->pending(), 0u);
  EXPECT_EQ(store_->GetClusterStatus().counters.transfer_held_operations, 2u);
  // No hold any more: a follower refuses at once.
  Reply<BeginResult> after = Begin("c", Owner("o"));
  ASSERT_TRUE(after.answered());
  EXPECT_EQ(LeaderPayload(after.status()), kOtherClient);
}

TEST_F(TransferTest, AFailedTransferProposesWhatItHeld) {
  DoneReply transferred = StartTransfer();
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  EXPECT_EQ(fake_->pending(), 0u);

  fake_->FinishChange(absl::DeadlineExceededError("not transferred"));
  Settle();
  EXPECT_FALSE(transferred.status().ok());
  ASSERT_TRUE(begin.answered());
  ASSERT_TRUE(begin.status().ok()) << begin.status();
  EXPECT_EQ(begin.get()->decision.status, BeginStatus::kStarted);
}

TEST_F(TransferTest, AProposalCutOffByTheTransferIsAnsweredFromItsApply) {
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  ASSERT_EQ(fake_->pending(), 1u);
  const std::string entry = fake_->PendingEntries()[0];
  StartTransfer();

  // The engine ends the proposal (leadership lost); the new leader has
  // the entry and commits it, and this node applies it as a follower.
  fake_->LoseLeadership(kOther);
  fake_->RunPosted();
  EXPECT_FALSE(begin.answered());
  fake_->FinishChange(absl::OkStatus());
  fake_->RunPosted();
  EXPECT_FALSE(begin.answered());
  ASSERT_TRUE(fake_->Follow(entry).ok());
  ASSERT_TRUE(begin.answered());
  ASSERT_TRUE(begin.status().ok()) << begin.status();
  EXPECT_EQ(begin.get()->decision.status, BeginStatus::kStarted);
  const ReplicationCounters counters = store_->GetClusterStatus().counters;
  EXPECT_EQ(counters.orphaned_operations_answered, 1u);
  EXPECT_EQ(counters.unknown_outcomes, 0u);
}

TEST_F(TransferTest, ACutOffProposalNeverAppliedEndsOutcomeUnknown) {
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  ASSERT_EQ(fake_->pending(), 1u);
  StartTransfer();
  fake_->LoseLeadership(kOther);
  fake_->FinishChange(absl::OkStatus());
  fake_->RunPosted();

  clock_.Advance(kHoldMs - 1);
  fake_->Tick();
  EXPECT_FALSE(begin.answered());
  clock_.Advance(1);
  fake_->Tick();
  ASSERT_TRUE(begin.answered());
  EXPECT_TRUE(OutcomeUnknown(begin.status())) << begin.status();
  EXPECT_EQ(store_->GetClusterStatus().counters.unknown_outcomes, 1u);
}

TEST_F(TransferTest, AnElectionHoldsCallsUntilItsWinnerIsKnown) {
  fake_->LoseLeadership(kOther);
  // The leader is lost (an election runs): held, not refused.
  fake_->LoseLeadership(0);
  EXPECT_TRUE(store_->CheckServing().ok());
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  EXPECT_FALSE(begin.answered());

  fake_->LoseLeadership(kOther);
  fake_->RunPosted();
  ASSERT_TRUE(begin.answered());
  EXPECT_TRUE(absl::IsUnavailable(begin.status())) << begin.status();
  EXPECT_EQ(LeaderPayload(begin.status()), kOtherClient);
}

TEST_F(TransferTest, AHoldEndsWithinItsBoundWhenNoLeaderComes) {
  fake_->LoseLeadership(0);
  Reply<BeginResult> begin = Begin("a", Owner("o"));
  fake_->RunPosted();
  EXPECT_FALSE(begin.answered());

  clock_.Advance(kHoldMs);
  fake_->Tick();
  fake_->RunPosted();
  ASSERT_TRUE(begin.answered());
  EXPECT_TRUE(absl::IsUnavailable(begin.status())) << begin.status();
  EXPECT_EQ(LeaderPayload(begin.status()), "");
  // Not holding: refused at once.
  EXPECT_TRUE(absl::IsUnavailable(store_->CheckServing()));
}

}  // namespace
}  // namespace dedup::replicated_store_test
