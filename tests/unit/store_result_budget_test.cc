// The single-node store's Begins on completed records: a DUPLICATE carries
// its stored result only while the request's ResultBudget has room, a
// refused one changes nothing, and decisions that rewrite a completed record
// (a retry over an ERROR outcome) never carry its old result along.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/testing/server_process.h"
#include "tests/unit/store_test_util.h"

namespace dedup {
namespace {

using ::dedup::testing::BeginSync;
using ::dedup::testing::CompleteSync;
using ::dedup::testing::GetSync;
using ::dedup::testing::MakeBeginParams;
using ::dedup::testing::MakeTempDir;

// A result that is not one byte repeated, so a wrong slice of it shows.
std::string PatternedResult(size_t bytes) {
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>('a' + i % 23);
  return out;
}

class StoreResultBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-budget");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    StoreOptions options;
    options.path = dir_;
    options.durability = Durability::kSync;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Begins `key` then completes it with `result` and `outcome`.
  void Finish(const std::string& key, const std::string& result,
              Outcome outcome = Outcome::kSuccess) {
    absl::StatusOr<BeginResult> begin =
        BeginSync(*store_, key, MakeBeginParams("w"));
    ASSERT_TRUE(begin.ok()) << begin.status();
    ASSERT_EQ(begin->decision.status, BeginStatus::kStarted);
    absl::StatusOr<FencedDecision> done = CompleteSync(
        *store_, key, begin->decision.record.fence, result, outcome);
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->status, FencedStatus::kOk);
  }

  // BeginMany of `n` Begins of `key` sharing `budget`; every answer.
  std::vector<absl::StatusOr<BeginResult>> BeginMany(const std::string& key,
                                                     int n,
                                                     ResultBudget* budget) {
    absl::Mutex mu;
    std::vector<absl::StatusOr<BeginResult>> answers;
    absl::BlockingCounter done(n);
    std::vector<Store::BeginCall> calls;
    for (int i = 0; i < n; ++i) {
      calls.push_back(Store::BeginCall{"ns", key, MakeBeginParams("r"),
                                       [&](absl::StatusOr<BeginResult> r) {
                                         {
                                           absl::MutexLock lock(&mu);
                                           answers.push_back(std::move(r));
                                         }
                                         done.DecrementCount();
                                       },
                                       budget});
    }
    store_->BeginMany(std::move(calls));
    done.Wait();
    return answers;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreResultBudgetTest, DuplicatesWithinTheBudgetCarryTheirResult) {
  const std::string result = PatternedResult(40'000);
  Finish("k", result);
  ResultBudget budget(100'000);  // room for two of the three
  int duplicates = 0;
  int refused = 0;
  for (const absl::StatusOr<BeginResult>& r : BeginMany("k", 3, &budget)) {
    if (r.ok()) {
      ASSERT_EQ(r->decision.status, BeginStatus::kDuplicate);
      EXPECT_EQ(r->decision.record.result, result);
      EXPECT_EQ(r->decision.record.outcome, Outcome::kSuccess);
      ++duplicates;
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
      EXPECT_TRUE(r.status().GetPayload(kResultBudgetPayload).has_value())
          << r.status();
      ++refused;
    }
  }
  EXPECT_EQ(duplicates, 2);
  EXPECT_EQ(refused, 1);

  // Nothing was written for the refusal: the record is as completed.
  absl::StatusOr<std::optional<Record>> stored = GetSync(*store_, "k");
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->state, RecordState::kCompleted);
  EXPECT_EQ((*stored)->result, result);
}

TEST_F(StoreResultBudgetTest, AResultLargerThanTheWholeBudgetIsRefused) {
  Finish("big", PatternedResult(70'000));
  Finish("small", "ok");
  ResultBudget budget(64 << 10);
  std::vector<absl::StatusOr<BeginResult>> big = BeginMany("big", 1, &budget);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].status().code(), absl::StatusCode::kUnavailable);
  // The refusal reserved nothing: a small result still fits.
  std::vector<absl::StatusOr<BeginResult>> small =
      BeginMany("small", 1, &budget);
  ASSERT_EQ(small.size(), 1u);
  ASSERT_TRUE(small[0].ok()) << small[0].status();
  EXPECT_EQ(small[0]->decision.record.result, "ok");
}

TEST_F(StoreResultBudgetTest, WithoutABudgetEveryDuplicateCarriesItsResult) {
  const std::string result = PatternedResult(100'000);
  Finish("k", result);
  for (const absl::StatusOr<BeginResult>& r : BeginMany("k", 4, nullptr)) {
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->decision.status, BeginStatus::kDuplicate);
    EXPECT_EQ(r->decision.record.result, result);
  }
}

TEST_F(StoreResultBudgetTest, ARetryOverAnErrorDropsTheOldResult) {
  Finish("e", PatternedResult(30'000), Outcome::kError);
  BeginParams retry = MakeBeginParams("second");
  retry.retry_errors = true;
  absl::StatusOr<BeginResult> again = BeginSync(*store_, "e", retry);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->decision.status, BeginStatus::kStarted);
  EXPECT_TRUE(again->decision.rerun);
  EXPECT_TRUE(again->decision.record.result.empty());

  absl::StatusOr<std::optional<Record>> stored = GetSync(*store_, "e");
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->state, RecordState::kInFlight);
  EXPECT_TRUE((*stored)->result.empty());

  // The second attempt's result is the one a DUPLICATE then carries.
  absl::StatusOr<FencedDecision> done =
      CompleteSync(*store_, "e", again->decision.record.fence, "second try");
  ASSERT_TRUE(done.ok()) << done.status();
  absl::StatusOr<BeginResult> dup = BeginSync(*store_, "e", retry);
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ(dup->decision.status, BeginStatus::kDuplicate);
  EXPECT_EQ(dup->decision.record.result, "second try");
}

}  // namespace
}  // namespace dedup
