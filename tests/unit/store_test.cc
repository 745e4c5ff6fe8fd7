// The RocksDB store on a real temporary database: TTL on read and by
// compaction, fences across restarts, per-key atomicity, parked Begins.
#include "storage/store.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/storage_key.h"
#include "tests/testing/server_process.h"
#include "tests/unit/store_test_util.h"

namespace dedup {
namespace {

using ::dedup::testing::MakeTempDir;

using ::dedup::testing::BeginSync;
using ::dedup::testing::CompleteSync;
using ::dedup::testing::GetSync;
using ::dedup::testing::MakeBeginParams;
using ::dedup::testing::ReleaseSync;

constexpr int64_t kT0 = 1'700'000'000'000;

// Waits for the background scan that loads in-flight records after an open
// (it reports the lease figures as saturated until done).
void AwaitLeaseIndex(Store& store) {
  for (int i = 0; i < 10'000 && store.Stats().inflight_tracking_saturated;
       ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_FALSE(store.Stats().inflight_tracking_saturated)
      << "the in-flight scan never finished";
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-store");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  StoreOptions Options(Durability durability = Durability::kSync) {
    StoreOptions o;
    o.path = dir_;
    o.durability = durability;
    o.clock = &clock_;
    o.compaction_grace_ms = 1000;
    return o;
  }

  void OpenStore(StoreOptions options) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::string dir_;
  FakeClock clock_{kT0};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, ExpiredRecordsVanishOnReadAndCompactionDropsThem) {
  OpenStore(Options());
  constexpr int kExpiring = 50;
  for (int i = 0; i < kExpiring; ++i) {
    const std::string key = absl::StrCat("short-", i);
    auto begun = BeginSync(*store_, key, MakeBeginParams("o", "h", 100, 1));
    ASSERT_TRUE(begun.ok());
    ASSERT_TRUE(CompleteSync(*store_, key, begun->decision.record.fence, "x",
                             Outcome::kSuccess, 1)
                    .ok());
  }
  auto keep = BeginSync(*store_, "long", MakeBeginParams("o", "h", 100, 3600));
  ASSERT_TRUE(keep.ok());

  clock_.Advance(1000);  // exactly at expiry of the short records
  auto got = GetSync(*store_, "short-0");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value()) << "expired record must be absent on read";
  auto again = BeginSync(*store_, "short-1", MakeBeginParams("p"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->decision.status, BeginStatus::kStarted);
  ASSERT_TRUE(
      ReleaseSync(*store_, "short-1", again->decision.record.fence).ok());

  // Still physically there: readers hide it, compaction has not run.
  EXPECT_EQ(*store_->CountStoredRecords(), kExpiring);  // one released
  ASSERT_TRUE(store_->CompactAll().ok());
  // Inside the grace period the filter keeps them.
  EXPECT_EQ(*store_->CountStoredRecords(), kExpiring);

  clock_.Advance(1000);  // past expiry + grace
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(*store_->CountStoredRecords(), 1u) << "only the live record stays";
  EXPECT_EQ(store_->Stats().expired_dropped, kExpiring - 1);
  auto live = GetSync(*store_, "long");
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->has_value());
}

TEST_F(StoreTest, FencesKeepRisingAcrossRestartReleaseAndExpiry) {
  uint64_t highest = 0;
  {
    OpenStore(Options());
    for (int i = 0; i < 5; ++i) {
      auto b = BeginSync(*store_, absl::StrCat("k", i), MakeBeginParams("o"));
      ASSERT_TRUE(b.ok());
      EXPECT_GT(b->decision.record.fence, highest);
      highest = b->decision.record.fence;
    }
    ASSERT_TRUE(CompleteSync(*store_, "k0", 1, "stale?").ok());
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
  }
  OpenStore(Options());
  auto b = BeginSync(*store_, "fresh", MakeBeginParams("o"));
  ASSERT_TRUE(b.ok());
  EXPECT_GT(b->decision.record.fence, highest);
  highest = b->decision.record.fence;
  // k4 is still in flight under its old fence; release and re-begin.
  auto k4 = GetSync(*store_, "k4");
  ASSERT_TRUE(k4.ok() && k4->has_value());
  ASSERT_EQ(ReleaseSync(*store_, "k4", (*k4)->fence)->status,
            FencedStatus::kOk);
  auto rebegun = BeginSync(*store_, "k4", MakeBeginParams("o2"));
  ASSERT_TRUE(rebegun.ok());
  EXPECT_GT(rebegun->decision.record.fence, highest);
}

TEST_F(StoreTest, ConcurrentBeginsOnOneKeyStartExactlyOnce) {
  OpenStore(Options(Durability::kNone));
  constexpr int kThreads = 32;
  constexpr int kRounds = 50;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> started{0}, in_use{0};
    std::vector<std::thread> threads;
    const std::string key = absl::StrCat("race-", round);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto r = BeginSync(*store_, key, MakeBeginParams(absl::StrCat("o", t)));
        ASSERT_TRUE(r.ok());
        if (r->decision.status == BeginStatus::kStarted) ++started;
        if (r->decision.status == BeginStatus::kInUse) ++in_use;
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(started.load(), 1) << key;
    EXPECT_EQ(in_use.load(), kThreads - 1) << key;
  }
}

// Which thread ran the callback of `submit`: the caller's (answered inline)
// or a storage thread.
template <typename T, typename Submit>
bool AnsweredOnCallersThread(Submit submit) {
  absl::Notification done;
  std::thread::id answered_on;
  submit([&](absl::StatusOr<T> result) {
    EXPECT_TRUE(result.ok()) << result.status();
    answered_on = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  return answered_on == std::this_thread::get_id();
}

TEST_F(StoreTest, IdleShardAnswersOnCallersThreadOnlyWithoutDiskWrites) {
  OpenStore(Options(Durability::kSync));
  Store& store = *store_;
  auto begin = [&](const std::string& key, int64_t wait_ms = 0) {
    return AnsweredOnCallersThread<BeginResult>(
        [&](StoreCallback<BeginResult> cb) {
          store.Begin("ns", key, MakeBeginParams("o"), wait_ms, std::move(cb));
        });
  };
  // A new key needs a synced write: the storage thread answers.
  EXPECT_FALSE(begin("k"));
  auto started = GetSync(store, "k");
  ASSERT_TRUE(started.ok() && started->has_value());
  EXPECT_FALSE(AnsweredOnCallersThread<FencedDecision>(
      [&](StoreCallback<FencedDecision> cb) {
        store.Complete(
            "ns", "k",
            CompleteParams{(*started)->fence, Outcome::kSuccess, "r", 0},
            std::move(cb));
      }));
  // Replaying the completed key only reads memory: answered inline.
  EXPECT_TRUE(begin("k"));
  EXPECT_TRUE(AnsweredOnCallersThread<std::optional<Record>>(
      [&](StoreCallback<std::optional<Record>> cb) {
        store.Get("ns", "k", std::move(cb));
      }));
  // A Begin that may wait is always the storage thread's (it may park).
  EXPECT_FALSE(begin("k", /*wait_ms=*/1000));
}

// A shard decides operations in the order they were submitted, also when
// a later one could be answered inline: a Get submitted right after a Begin
// sees the record that Begin writes. (CI once caught the shard thread between
// taking a batch off its queue and deciding it, and a Get answered inline in
// that gap.)
TEST_F(StoreTest, AShardDecidesOperationsInSubmissionOrder) {
  OpenStore(Options(Durability::kSync));
  Store& store = *store_;
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 500;
  std::atomic<int> missed{0};
  absl::BlockingCounter answered(2 * kThreads * kKeysPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const std::string key = absl::StrCat("k-", t, "-", i);
        store.Begin(
            "ns", key, MakeBeginParams("o"), 0,
            [&](absl::StatusOr<BeginResult>) { answered.DecrementCount(); });
        store.Get("ns", key, [&](absl::StatusOr<std::optional<Record>> got) {
          if (!got.ok() || !got->has_value()) ++missed;
          answered.DecrementCount();
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  answered.Wait();
  EXPECT_EQ(missed.load(), 0) << "Gets decided before the Begin before them";
}

TEST_F(StoreTest, WithoutAWalIdleShardWritesInlineAndSemanticsHold) {
  OpenStore(Options(Durability::kNone));
  Store& store = *store_;
  bool inline_begin =
      AnsweredOnCallersThread<BeginResult>([&](StoreCallback<BeginResult> cb) {
        store.Begin("ns", "k", MakeBeginParams("a"), 0, std::move(cb));
      });
  EXPECT_TRUE(inline_begin);
  auto again = BeginSync(store, "k", MakeBeginParams("b"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->decision.status, BeginStatus::kInUse);
  auto done = CompleteSync(store, "k", again->decision.record.fence, "r");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, FencedStatus::kOk);
  auto replay = BeginSync(store, "k", MakeBeginParams("c"));
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->decision.status, BeginStatus::kDuplicate);
  EXPECT_EQ(replay->decision.record.result, "r");
}

// Counts what the store reports to its observer.
class WriteCounter : public StoreObserver {
 public:
  void OnWrite(int operations, double seconds) override {
    EXPECT_GT(operations, 0);
    EXPECT_GE(seconds, 0);
    writes_ += operations;
    ++reports_;
  }
  int writes() const { return writes_.load(); }
  int reports() const { return reports_.load(); }

 private:
  std::atomic<int> writes_{0};
  std::atomic<int> reports_{0};
};

// The writes-per-fsync figure (dedup_writes_per_sync) counts every record
// write once, whichever thread made it (an idle shard lets the caller
// write), and reads add nothing.
TEST_F(StoreTest, SyncModeReportsEachRecordWriteOnceWithItsFsync) {
  WriteCounter counter;
  StoreOptions options = Options(Durability::kSync);
  options.observer = &counter;
  OpenStore(options);
  Store& store = *store_;
  constexpr int kKeys = 20;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = absl::StrCat("k", i);
    auto begun = BeginSync(store, key, MakeBeginParams("o"));
    ASSERT_TRUE(begun.ok()) << begun.status();
    ASSERT_EQ(begun->decision.status, BeginStatus::kStarted);
    auto done = CompleteSync(store, key, begun->decision.record.fence, "r");
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->status, FencedStatus::kOk);
    auto replay = BeginSync(store, key, MakeBeginParams("o"));
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(replay->decision.status, BeginStatus::kDuplicate);
    ASSERT_TRUE(GetSync(store, key).ok());
  }
  // One caller at a time: each write waits for its own fsync.
  EXPECT_EQ(counter.writes(), 2 * kKeys);
  EXPECT_EQ(counter.reports(), 2 * kKeys);
}

TEST_F(StoreTest, InlineAnswersCanBeSwitchedOff) {
  StoreOptions options = Options(Durability::kNone);
  options.answer_inline = false;
  OpenStore(options);
  Store& store = *store_;
  EXPECT_FALSE(
      AnsweredOnCallersThread<BeginResult>([&](StoreCallback<BeginResult> cb) {
        store.Begin("ns", "k", MakeBeginParams("a"), 0, std::move(cb));
      }));
  EXPECT_FALSE(
      AnsweredOnCallersThread<BeginResult>([&](StoreCallback<BeginResult> cb) {
        store.Begin("ns", "k", MakeBeginParams("a"), 0, std::move(cb));
      }));
}

TEST_F(StoreTest, ParkedBeginGetsDuplicateOnCompleteAndStartedOnRelease) {
  StoreOptions options = Options();
  options.clock = nullptr;  // parked Begins run on real timers
  OpenStore(options);
  auto owner = BeginSync(*store_, "k", MakeBeginParams("a"));
  ASSERT_TRUE(owner.ok());

  absl::Notification answered;
  absl::StatusOr<BeginResult> waiter = absl::UnknownError("unset");
  store_->Begin("ns", "k", MakeBeginParams("b"), /*wait_ms=*/10'000,
                [&](absl::StatusOr<BeginResult> r) {
                  waiter = std::move(r);
                  answered.Notify();
                });
  // Parked, not answered.
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  EXPECT_EQ(store_->Stats().waiting_begins, 1u);
  ASSERT_TRUE(
      CompleteSync(*store_, "k", owner->decision.record.fence, "done").ok());
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(waiter.ok());
  EXPECT_EQ(waiter->decision.status, BeginStatus::kDuplicate);
  EXPECT_EQ(waiter->decision.record.result, "done");
  EXPECT_TRUE(waiter->waited);

  // Two waiters, then a release: the first gets the claim, the second
  // keeps waiting behind it.
  auto owner2 = BeginSync(*store_, "k2", MakeBeginParams("a"));
  ASSERT_TRUE(owner2.ok());
  absl::Notification first_done, second_done;
  absl::StatusOr<BeginResult> first = absl::UnknownError("unset");
  absl::StatusOr<BeginResult> second = absl::UnknownError("unset");
  store_->Begin("ns", "k2", MakeBeginParams("b"), 10'000,
                [&](absl::StatusOr<BeginResult> r) {
                  first = std::move(r);
                  first_done.Notify();
                });
  store_->Begin("ns", "k2", MakeBeginParams("c"), 300,
                [&](absl::StatusOr<BeginResult> r) {
                  second = std::move(r);
                  second_done.Notify();
                });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_EQ(ReleaseSync(*store_, "k2", owner2->decision.record.fence)->status,
            FencedStatus::kOk);
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->decision.status, BeginStatus::kStarted);
  EXPECT_GT(first->decision.record.fence, owner2->decision.record.fence);
  EXPECT_FALSE(second_done.HasBeenNotified());
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(second->decision.status, BeginStatus::kInUse);
}

TEST_F(StoreTest, CloseAnswersParkedBegins) {
  StoreOptions options = Options();
  options.clock = nullptr;
  OpenStore(options);
  ASSERT_TRUE(BeginSync(*store_, "k", MakeBeginParams("a")).ok());
  absl::Notification answered;
  absl::StatusOr<BeginResult> waiter = absl::UnknownError("unset");
  store_->Begin("ns", "k", MakeBeginParams("b"), 60'000,
                [&](absl::StatusOr<BeginResult> r) {
                  waiter = std::move(r);
                  answered.Notify();
                });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(store_->Close().ok());
  ASSERT_TRUE(answered.HasBeenNotified());
  ASSERT_TRUE(waiter.ok());
  EXPECT_EQ(waiter->decision.status, BeginStatus::kInUse);
  // After Close, calls fail cleanly instead of hanging.
  auto late = BeginSync(*store_, "k", MakeBeginParams("c"));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(StoreTest, EveryDurabilityModeKeepsDataAcrossCleanClose) {
  for (Durability mode :
       {Durability::kSync, Durability::kAsync, Durability::kNone}) {
    OpenStore(Options(mode));
    const std::string key = absl::StrCat("mode-", static_cast<int>(mode));
    auto b = BeginSync(*store_, key, MakeBeginParams("o"));
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(CompleteSync(*store_, key, b->decision.record.fence, "v").ok());
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
    OpenStore(Options(mode));
    auto got = GetSync(*store_, key);
    ASSERT_TRUE(got.ok() && got->has_value()) << key;
    EXPECT_EQ((*got)->result, "v");
    store_.reset();
  }
}

TEST_F(StoreTest, LeaseStatsFollowWritesAndSurviveReopen) {
  OpenStore(Options());
  auto a = BeginSync(*store_, "a", MakeBeginParams("o", "h", 1000));
  auto b = BeginSync(*store_, "b", MakeBeginParams("o", "h", 5000));
  auto c = BeginSync(*store_, "c", MakeBeginParams("o", "h", 1000));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(CompleteSync(*store_, "c", c->decision.record.fence, "x").ok());
  StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.inflight_leases, 2u);
  EXPECT_EQ(stats.lapsed_leases, 0u);

  clock_.Advance(1500);  // a's lease lapsed, b's still live
  stats = store_->Stats();
  EXPECT_EQ(stats.inflight_leases, 1u);
  EXPECT_EQ(stats.lapsed_leases, 1u);
  EXPECT_EQ(stats.oldest_lapsed_lease_ms, 500);

  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  OpenStore(Options());  // seeded from disk, in the background
  AwaitLeaseIndex(*store_);
  stats = store_->Stats();
  EXPECT_EQ(stats.inflight_leases, 1u);
  EXPECT_EQ(stats.lapsed_leases, 1u);
  ASSERT_EQ(ReleaseSync(*store_, "a", a->decision.record.fence)->status,
            FencedStatus::kOk);
  EXPECT_EQ(store_->Stats().lapsed_leases, 0u);
}

// The scan at open runs while the shards serve: records it has not reached
// yet may be completed first, and its older view must not bring them back.
TEST_F(StoreTest, InflightScanAtOpenNeverOverridesNewerWrites) {
  StoreOptions options = Options(Durability::kNone);
  OpenStore(options);
  constexpr int kRecords = 40'000;
  std::vector<std::pair<std::string, uint64_t>> fences;  // storage order
  {
    std::vector<std::string> keys;
    for (int i = 0; i < kRecords; ++i) keys.push_back(absl::StrCat("r", i));
    fences.resize(kRecords);
    absl::BlockingCounter begun(kRecords);
    std::vector<Store::BeginCall> calls;
    for (int i = 0; i < kRecords; ++i) {
      calls.push_back({"ns", keys[i], MakeBeginParams("o"),
                       [&, i](absl::StatusOr<BeginResult> r) {
                         EXPECT_TRUE(r.ok()) << r.status();
                         if (r.ok())
                           fences[i] = {keys[i], r->decision.record.fence};
                         begun.DecrementCount();
                       }});
    }
    store_->BeginMany(std::move(calls));
    begun.Wait();
  }
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();

  // Complete from the end of the scan's order backwards, so the two cross.
  std::sort(fences.begin(), fences.end(), [](const auto& a, const auto& b) {
    return EncodeStorageKey("ns", a.first) > EncodeStorageKey("ns", b.first);
  });
  OpenStore(options);
  constexpr int kPerCall = 500;
  for (int first = 0; first < kRecords; first += kPerCall) {
    absl::BlockingCounter completed(kPerCall);
    std::vector<Store::CompleteCall> calls;
    for (int i = first; i < first + kPerCall; ++i) {
      calls.push_back(
          {"ns", fences[i].first,
           CompleteParams{fences[i].second, Outcome::kSuccess, "x", 0},
           [&completed](absl::StatusOr<FencedDecision> d) {
             EXPECT_TRUE(d.ok() && d->status == FencedStatus::kOk);
             completed.DecrementCount();
           }});
    }
    store_->CompleteMany(std::move(calls));
    completed.Wait();
  }
  AwaitLeaseIndex(*store_);
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.inflight_leases + stats.lapsed_leases, 0u)
      << "completed records counted as in flight";
}

TEST_F(StoreTest, LeaseTrackingIsBoundedAndSaysWhenSaturated) {
  StoreOptions options = Options();
  options.shards = 1;
  options.max_tracked_inflight_per_shard = 2;
  OpenStore(options);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE(BeginSync(*store_, key, MakeBeginParams("o")).ok());
  }
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.inflight_leases, 2u);
  EXPECT_TRUE(stats.inflight_tracking_saturated);
}

TEST_F(StoreTest, SecondOpenOfALockedDirectoryFailsClearly) {
  OpenStore(Options());
  absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("locked"), std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace dedup
