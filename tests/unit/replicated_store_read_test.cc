// Reads on the replicated store: only the leader copies stored results into
// answers, and only within the batch's result budget.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/replicated_store_fixture.h"

namespace dedup::replicated_store_test {
namespace {

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
}  // namespace dedup::replicated_store_test
