#include "replication/log_budget.h"

#include "gtest/gtest.h"

namespace dedup {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(LogBudgetTest, SmallEntriesKeepTheConfiguredCounts) {
  LogBudget budget(256 * kMiB, 4096, 2048);
  EXPECT_EQ(budget.threshold(), 4096u);
  EXPECT_EQ(budget.trailing(), 2048u);
  for (int i = 0; i < 100; ++i) budget.Observe(1000);
  EXPECT_EQ(budget.threshold(), 4096u);
  EXPECT_EQ(budget.trailing(), 2048u);
}

TEST(LogBudgetTest, LargeEntriesShareTheBudgetBetweenBothCounts) {
  LogBudget budget(256 * kMiB, 4096, 4096);
  for (int i = 0; i < 1000; ++i) budget.Observe(1 * kMiB);
  EXPECT_EQ(budget.threshold(), 128u);
  EXPECT_EQ(budget.trailing(), 128u);
  // What libraft may hold: threshold + trailing entries.
  EXPECT_LE((budget.threshold() + budget.trailing()) * kMiB, 256 * kMiB);
}

TEST(LogBudgetTest, NeverFewerThanSixteenEntriesUnlessConfiguredSo) {
  LogBudget budget(16 * kMiB, 4096, 8);
  for (int i = 0; i < 1000; ++i) budget.Observe(4 * kMiB);
  EXPECT_EQ(budget.threshold(), LogBudget::kMinEntries);
  EXPECT_EQ(budget.trailing(), 8u);
}

TEST(LogBudgetTest, FollowsTheAverageBothWays) {
  LogBudget budget(256 * kMiB, 4096, 4096);
  for (int i = 0; i < 1000; ++i) budget.Observe(600 * 1024);
  const unsigned under_batches = budget.threshold();
  EXPECT_GE(under_batches, 200u);
  EXPECT_LE(under_batches, 224u);
  // A burst of small entries moves the counts up gradually, not at once.
  budget.Observe(100);
  EXPECT_LT(budget.threshold(), 2 * under_batches);
  for (int i = 0; i < 1000; ++i) budget.Observe(100);
  EXPECT_EQ(budget.threshold(), 4096u);
}

}  // namespace
}  // namespace dedup
