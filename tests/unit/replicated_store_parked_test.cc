// Begins the replicated store parks on a key in use, until its owner
// finishes, the wait or the lease runs out, or leadership moves.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/replicated_store_fixture.h"

namespace dedup::replicated_store_test {
namespace {

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

}  // namespace
}  // namespace dedup::replicated_store_test
