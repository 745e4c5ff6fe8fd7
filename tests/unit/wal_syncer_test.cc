// WalSyncer against a real RocksDB opened with manual_wal_flush: an answer
// is released only once the WAL on disk holds every write visible when it
// was handed over, exactly once, and one sync serves many writers.
#include "storage/wal_syncer.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

using ::dedup::testing::MakeTempDir;

class CountingObserver : public StoreObserver {
 public:
  void OnWrite(int operations, double seconds) override {
    absl::MutexLock lock(&mu_);
    writes_ += operations;
    ++syncs_;
    EXPECT_GE(seconds, 0);
  }
  int writes() {
    absl::MutexLock lock(&mu_);
    return writes_;
  }
  int syncs() {
    absl::MutexLock lock(&mu_);
    return syncs_;
  }

 private:
  absl::Mutex mu_;
  int writes_ ABSL_GUARDED_BY(mu_) = 0;
  int syncs_ ABSL_GUARDED_BY(mu_) = 0;
};

class WalSyncerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-walsync");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    rocksdb::Options options;
    options.create_if_missing = true;
    options.manual_wal_flush = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir_, &db).ok());
    db_.reset(db);
  }
  void TearDown() override {
    if (db_ != nullptr) (void)db_->Close();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Bytes in the WAL files on disk (what a crash now would recover from,
  // short of the page cache).
  uintmax_t WalBytesOnDisk() const {
    uintmax_t bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().extension() == ".log") bytes += entry.file_size();
    }
    return bytes;
  }

  void Put(int i) {
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), absl::StrCat("key", i),
                         std::string(100, 'v'))
                    .ok());
  }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  CountingObserver observer_;
};

TEST_F(WalSyncerTest, NothingUnsyncedReleasesAtOnceOnTheCaller) {
  WalSyncer syncer(db_.get(), &observer_);
  bool released = false;
  syncer.AfterSync([&](const absl::Status& status) {
    EXPECT_TRUE(status.ok()) << status;
    released = true;
  });
  EXPECT_TRUE(released);
  EXPECT_EQ(observer_.syncs(), 0);
}

TEST_F(WalSyncerTest, ReleasesOnlyOnceTheWriteIsInTheWalOnDisk) {
  WalSyncer syncer(db_.get(), &observer_);
  const uintmax_t before = WalBytesOnDisk();
  Put(1);
  // manual_wal_flush: the write sits in RocksDB's buffer, not in the file.
  EXPECT_EQ(WalBytesOnDisk(), before);
  absl::Notification released;
  std::atomic<uintmax_t> bytes_at_release{0};
  const std::thread::id caller = std::this_thread::get_id();
  syncer.AfterSync([&](const absl::Status& status) {
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_NE(std::this_thread::get_id(), caller);
    bytes_at_release = WalBytesOnDisk();
    released.Notify();
  });
  released.WaitForNotification();
  EXPECT_GT(bytes_at_release.load(), before + 100);
  EXPECT_EQ(observer_.writes(), 1);
  EXPECT_EQ(observer_.syncs(), 1);

  // Covered by that sync now: no second one.
  bool again = false;
  syncer.AfterSync([&](const absl::Status&) { again = true; });
  EXPECT_TRUE(again);
  EXPECT_EQ(observer_.syncs(), 1);
}

TEST_F(WalSyncerTest, ManyWritersEachReleasedOnceSharingSyncs) {
  constexpr int kThreads = 8;
  constexpr int kWritesEach = 200;
  WalSyncer syncer(db_.get(), &observer_);
  std::atomic<int> released{0};
  absl::BlockingCounter all(kThreads * kWritesEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWritesEach; ++i) {
        Put(t * kWritesEach + i);
        syncer.AfterSync([&](const absl::Status& status) {
          EXPECT_TRUE(status.ok()) << status;
          released.fetch_add(1);
          all.DecrementCount();
        });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  all.Wait();
  EXPECT_EQ(released.load(), kThreads * kWritesEach);
  // Every write counted once, by the sync that made it durable, however the
  // syncs fell (a write an earlier sync covered is released at once).
  EXPECT_EQ(observer_.writes(), kThreads * kWritesEach);
  EXPECT_GE(observer_.syncs(), 1);
  EXPECT_LE(observer_.syncs(), kThreads * kWritesEach);
}

TEST_F(WalSyncerTest, AfterStopTheCallerSyncsItself) {
  WalSyncer syncer(db_.get(), &observer_);
  syncer.Stop();
  const uintmax_t before = WalBytesOnDisk();
  Put(7);
  bool released = false;
  syncer.AfterSync([&](const absl::Status& status) {
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_GT(WalBytesOnDisk(), before + 100);
    released = true;
  });
  EXPECT_TRUE(released);
  EXPECT_EQ(observer_.syncs(), 1);
}

TEST_F(WalSyncerTest, StopReleasesWhatIsPending) {
  std::atomic<int> released{0};
  {
    WalSyncer syncer(db_.get(), &observer_);
    for (int i = 0; i < 50; ++i) {
      Put(i);
      syncer.AfterSync([&](const absl::Status& status) {
        EXPECT_TRUE(status.ok()) << status;
        released.fetch_add(1);
      });
    }
  }  // destroyed: stops
  EXPECT_EQ(released.load(), 50);
}

}  // namespace
}  // namespace dedup
