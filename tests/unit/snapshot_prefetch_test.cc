// SnapshotPrefetch: fetches off the caller's thread, tries every source,
// retries a failed round later, leaves no partial copy, and cancels.
#include "replication/snapshot_prefetch.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

using std::chrono::milliseconds;

class SnapshotPrefetchTest : public ::testing::Test {
 protected:
  SnapshotPrefetchTest()
      : dir_(::testing::TempDir() + "/prefetch-" + std::to_string(::getpid()) +
             "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()) {
    std::filesystem::remove_all(dir_);
  }
  ~SnapshotPrefetchTest() override { std::filesystem::remove_all(dir_); }

  // Polls Prepare until it says the copy is ready (or 5 s pass).
  static bool WaitReady(SnapshotPrefetch& prefetch, uint64_t index,
                        const std::vector<std::string>& sources) {
    for (int i = 0; i < 500; ++i) {
      if (prefetch.Prepare(index, sources)) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  // A fetch that writes one file and returns `applied`, or fails for
  // addresses starting with "bad" after writing part of a copy.
  FetchCheckpointFn Fetch(uint64_t applied) {
    return [this, applied](
               const std::string& address, uint64_t, const std::string& dir,
               const std::atomic<bool>*) -> absl::StatusOr<uint64_t> {
      {
        absl::MutexLock lock(&mu_);
        calls_.push_back(address);
      }
      std::filesystem::create_directories(dir);
      std::ofstream(dir + "/part") << address;
      if (address.rfind("bad", 0) == 0) {
        return absl::UnavailableError("source is down");
      }
      return applied;
    };
  }

  std::vector<std::string> Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  const std::string dir_;
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SnapshotPrefetchTest, FetchesOnceAndHandsTheCopyOver) {
  SnapshotPrefetch prefetch(dir_, Fetch(120));
  EXPECT_FALSE(prefetch.Prepare(100, {"a", "b"}));  // started, not ready
  ASSERT_TRUE(WaitReady(prefetch, 100, {"a", "b"}));
  EXPECT_EQ(Calls(), std::vector<std::string>{"a"});
  // A newer index than the copy covers is not ready.
  EXPECT_FALSE(prefetch.TakeFetched(121).has_value());
  std::optional<uint64_t> taken = prefetch.TakeFetched(110);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, 120u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/part"));
  // Taken: the next call for it fetches again.
  EXPECT_FALSE(prefetch.TakeFetched(110).has_value());
}

TEST_F(SnapshotPrefetchTest, TriesTheNextSourceAndRemovesPartialCopies) {
  SnapshotPrefetch prefetch(dir_, Fetch(100));
  ASSERT_TRUE(WaitReady(prefetch, 100, {"bad-leader", "good"}));
  EXPECT_EQ(Calls(), (std::vector<std::string>{"bad-leader", "good"}));
  std::ifstream part(dir_ + "/part");
  std::string content;
  part >> content;
  EXPECT_EQ(content, "good");
}

TEST_F(SnapshotPrefetchTest, AFailedRoundLeavesNothingAndIsRetriedLater) {
  SnapshotPrefetch prefetch(dir_, Fetch(100));
  EXPECT_FALSE(prefetch.Prepare(100, {"bad-1", "bad-2"}));
  for (int i = 0; i < 200 && Calls().size() < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(std::filesystem::exists(dir_));
  // Within a second of the failure nothing starts.
  EXPECT_FALSE(prefetch.Prepare(100, {"good"}));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(Calls().size(), 2u);
  EXPECT_FALSE(prefetch.TakeFetched(100).has_value());
  // Then it tries again.
  ASSERT_TRUE(WaitReady(prefetch, 100, {"good"}));
  EXPECT_EQ(Calls().back(), "good");
}

TEST_F(SnapshotPrefetchTest, StopCancelsARunningFetch) {
  std::atomic<bool> saw_cancel{false};
  SnapshotPrefetch prefetch(
      dir_,
      [&](const std::string&, uint64_t, const std::string& dir,
          const std::atomic<bool>* cancelled) -> absl::StatusOr<uint64_t> {
        std::filesystem::create_directories(dir);
        while (!cancelled->load()) std::this_thread::sleep_for(milliseconds(1));
        saw_cancel.store(true);
        return absl::CancelledError("cancelled");
      });
  EXPECT_FALSE(prefetch.Prepare(100, {"a", "b"}));
  std::this_thread::sleep_for(milliseconds(20));
  prefetch.Stop();
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_FALSE(std::filesystem::exists(dir_));
  // Stopped: nothing starts again.
  EXPECT_FALSE(prefetch.Prepare(100, {"a"}));
  EXPECT_FALSE(prefetch.TakeFetched(100).has_value());
}

}  // namespace
}  // namespace dedup
