// The single-node store on a full disk (a small tmpfs mounted by the test:
// root only, skipped otherwise): writes stop at once with a clear
// UNAVAILABLE, the stop shows in StoreStats, reads are still answered, and
// writes come back by themselves once there is room. Both ways: refused
// before RocksDB meets the full disk (the free-space floor), and after
// RocksDB's own write failed (reads are then answered from what the last
// WAL sync made durable, never from a write whose sync failed). And a
// damaged table met by a compaction, which stops writes for good.
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

class StoreWriteStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the test mounts a small tmpfs to fill";
    }
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-writestop");
    ASSERT_TRUE(dir.ok()) << dir.status();
    mount_point_ = *dir;
    if (mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, "size=24m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
    }
    mounted_ = true;
    filler_ = mount_point_ + "/filler";
    std::ofstream(filler_, std::ios::binary) << std::string(4 << 20, 'f');
  }
  void TearDown() override {
    store_.reset();
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
    if (!mount_point_.empty()) rmdir(mount_point_.c_str());
  }

  // Deletes the filler and polls (up to 10 s) until the store writes again;
  // returns how long that took.
  absl::Duration FreeSpaceAndAwaitWrites() {
    EXPECT_TRUE(std::filesystem::remove(filler_));
    const absl::Time freed = absl::Now();
    while (store_->Stats().write_stopped &&
           absl::Now() - freed < absl::Seconds(10)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::Now() - freed;
  }

  std::string mount_point_;
  bool mounted_ = false;
  std::string filler_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreWriteStopTest, StopsAtTheFreeSpaceFloorAndResumesWithRoom) {
  StoreOptions options;
  options.path = mount_point_ + "/db";
  options.durability = Durability::kSync;
  // Of 20 MiB free, less what RocksDB preallocates (4 MiB each for the WAL
  // and the MANIFEST).
  options.min_free_disk_bytes = 6 << 20;
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store_ = *std::move(opened);

  const std::string result(256 << 10, 'r');
  std::vector<std::string> acked;
  absl::Status failure;
  for (int i = 0; i < 1000 && failure.ok(); ++i) {
    const std::string key = absl::StrCat("k", i);
    absl::StatusOr<BeginResult> began =
        BeginSync(*store_, key, MakeBeginParams("o"));
    absl::StatusOr<FencedDecision> done =
        began.ok()
            ? CompleteSync(*store_, key, began->decision.record.fence, result)
            : absl::StatusOr<FencedDecision>(began.status());
    if (!done.ok()) {
      failure = done.status();
    } else {
      acked.push_back(key);
    }
  }
  ASSERT_FALSE(failure.ok()) << "the floor was never reached";
  ASSERT_FALSE(acked.empty());
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_TRUE(absl::StrContains(failure.message(), "kept free")) << failure;

  StoreStats stats = store_->Stats();
  EXPECT_TRUE(stats.write_stopped);
  EXPECT_LT(stats.data_dir_free_bytes, 6u << 20);
  EXPECT_EQ(stats.background_errors, 0u) << "RocksDB never met the full disk";
  EXPECT_TRUE(absl::StrContains(stats.write_error, "resume by themselves"))
      << stats.write_error;
  EXPECT_EQ(store_->CheckServing().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(store_->CheckServingReads().ok());
  absl::StatusOr<std::optional<Record>> got = GetSync(*store_, acked.back());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());

  const absl::Duration resumed_after = FreeSpaceAndAwaitWrites();
  stats = store_->Stats();
  ASSERT_FALSE(stats.write_stopped) << stats.write_error;
  EXPECT_EQ(stats.write_resumes, 1u);
  EXPECT_LT(resumed_after, absl::Seconds(1));
  absl::StatusOr<BeginResult> began =
      BeginSync(*store_, "after", MakeBeginParams("o"));
  EXPECT_TRUE(began.ok()) << began.status();
  for (const std::string& key : acked) {
    got = GetSync(*store_, key);
    ASSERT_TRUE(got.ok() && got->has_value()) << key;
  }
  EXPECT_TRUE(store_->Close().ok());
}

TEST_F(StoreWriteStopTest, RocksDbWriteFailureStopsReadsDurableStateResumes) {
  StoreOptions options;
  options.path = mount_point_ + "/db";
  options.durability = Durability::kSync;
  options.write_retry_interval_ms = 100;
  options.min_free_disk_bytes = 0;  // let RocksDB meet the full disk
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store_ = *std::move(opened);

  const std::string result(256 << 10, 'r');
  std::vector<std::string> acked;
  std::string unacked;  // Begun (durably), its Complete refused
  uint64_t unacked_fence = 0;
  absl::Status failure;
  for (int i = 0; i < 1000 && failure.ok(); ++i) {
    const std::string key = absl::StrCat("k", i);
    absl::StatusOr<BeginResult> began =
        BeginSync(*store_, key, MakeBeginParams("o"));
    if (!began.ok()) {
      failure = began.status();
      break;
    }
    absl::StatusOr<FencedDecision> done =
        CompleteSync(*store_, key, began->decision.record.fence, result);
    if (!done.ok()) {
      failure = done.status();
      unacked = key;
      unacked_fence = began->decision.record.fence;
      break;
    }
    ASSERT_EQ(done->status, FencedStatus::kOk);
    acked.push_back(key);
  }
  ASSERT_FALSE(failure.ok()) << "the disk never filled";
  ASSERT_FALSE(acked.empty());
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_TRUE(absl::StrContains(failure.message(), "No space left on device"))
      << failure;

  StoreStats stats = store_->Stats();
  EXPECT_TRUE(stats.write_stopped);
  EXPECT_GE(stats.background_errors, 1u);
  EXPECT_EQ(stats.write_resumes, 0u);
  EXPECT_TRUE(absl::StrContains(stats.write_error, "No space left on device"))
      << stats.write_error;
  const absl::Status serving = store_->CheckServing();
  EXPECT_EQ(serving.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(serving.message(), "storage cannot write: "))
      << serving;
  EXPECT_TRUE(absl::StrContains(serving.message(), "retrying every 100 ms"))
      << serving;
  EXPECT_TRUE(store_->CheckServingReads().ok());

  // Writes are refused at once, whatever path they take.
  const absl::Time start = absl::Now();
  absl::StatusOr<BeginResult> refused =
      BeginSync(*store_, "while-stopped", MakeBeginParams("o"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));

  // Reads: what was acknowledged, and nothing whose sync failed.
  absl::StatusOr<std::optional<Record>> got = GetSync(*store_, acked.front());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->result, result);
  if (!unacked.empty()) {
    got = GetSync(*store_, unacked);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "its Begin was acknowledged";
    EXPECT_EQ((*got)->state, RecordState::kInFlight)
        << "a read reported a Complete whose WAL sync failed";
  }

  const absl::Duration resumed_after = FreeSpaceAndAwaitWrites();
  stats = store_->Stats();
  ASSERT_FALSE(stats.write_stopped) << stats.write_error;
  EXPECT_EQ(stats.write_resumes, 1u);
  EXPECT_TRUE(stats.write_error.empty());
  EXPECT_LT(resumed_after, absl::Seconds(2));

  // The refused Complete, retried, lands (or had landed: same answer).
  if (!unacked.empty()) {
    absl::StatusOr<FencedDecision> retried =
        CompleteSync(*store_, unacked, unacked_fence, result);
    ASSERT_TRUE(retried.ok()) << retried.status();
    EXPECT_EQ(retried->status, FencedStatus::kOk);
  }
  for (const std::string& key : acked) {
    got = GetSync(*store_, key);
    ASSERT_TRUE(got.ok() && got->has_value()) << key;
  }
  EXPECT_TRUE(store_->Close().ok());
}

// A compaction that meets a damaged block stops writes for good, saying a
// restart (and a restore) is needed; the restart then refuses the data dir,
// naming the file. Needs no root.
TEST(StoreDamagedTableTest, CompactionMeetingADamagedBlockStopsWritesForGood) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-damagedtable");
  ASSERT_TRUE(dir.ok()) << dir.status();
  StoreOptions options;
  options.path = *dir + "/db";
  options.write_retry_interval_ms = 100;
  auto write = [](Store& store, int from, int to) {
    for (int i = from; i < to; ++i) {
      const std::string key = absl::StrCat("k", i);
      absl::StatusOr<BeginResult> began =
          BeginSync(store, key, MakeBeginParams("o"));
      ASSERT_TRUE(began.ok()) << began.status();
      ASSERT_TRUE(CompleteSync(store, key, began->decision.record.fence,
                               std::string(200, 'r'))
                      .ok());
    }
  };
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    write(**store, 0, 200);
    ASSERT_TRUE((*store)->CompactAll().ok());  // all in one bottom table
    std::string table;
    for (const auto& entry :
         std::filesystem::directory_iterator(options.path)) {
      if (entry.path().extension() == ".sst") table = entry.path().string();
    }
    ASSERT_FALSE(table.empty());
    {
      std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);  // inside the first data block
      f.put('\xff');
    }
    EXPECT_FALSE((*store)->CompactAll().ok());  // rewrites the damaged table
    const StoreStats stats = (*store)->Stats();
    EXPECT_TRUE(stats.write_stopped);
    EXPECT_GE(stats.background_errors, 1u);
    EXPECT_TRUE(absl::StrContains(stats.write_error, "Corruption"))
        << stats.write_error;
    EXPECT_TRUE(absl::StrContains(stats.write_error, "restart dedupd"))
        << stats.write_error;
    absl::StatusOr<BeginResult> refused =
        BeginSync(**store, "after", MakeBeginParams("o"));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    // Retrying does not bring writes back: RocksDB cannot resume from it.
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_TRUE((*store)->Stats().write_stopped);
    (void)(*store)->Close();
  }
  absl::StatusOr<std::unique_ptr<Store>> reopened = Store::Open(options);
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kDataLoss)
      << reopened.status();
  EXPECT_TRUE(absl::StrContains(reopened.status().message(), ".sst"))
      << reopened.status();
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace dedup
