// InstallSnapshot at a restart behind the node's own snapshot: it fetches a
// checkpoint from the first source that has one, and after a whole group lost
// power keeps trying, round after round, while the others start.
#include "replication/snapshot_transfer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/log_entry.h"
#include "storage/replicated_state.h"
#include "storage/storage_key.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

class SnapshotTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-transfer");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
    source_ = Open("source");
    target_ = Open("target");
    ASSERT_NE(source_, nullptr);
    ASSERT_NE(target_, nullptr);
    for (uint64_t index = 1; index <= 5; ++index) {
      LogBegin begin;
      begin.skey = EncodeStorageKey("ns", "k" + std::to_string(index));
      begin.params.owner = "o";
      begin.params.args_hash = "h";
      begin.params.lease_ms = 10'000;
      begin.params.ttl_s = 3600;
      LogEntry entry;
      entry.now_ms = 1000;
      entry.ops = {begin};
      ASSERT_TRUE(source_->Apply(index, entry).ok());
    }
  }
  void TearDown() override {
    source_.reset();
    target_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<ReplicatedState> Open(const std::string& name) {
    ReplicatedStateOptions options;
    options.path = dir_ + "/" + name;
    options.memory_budget_bytes = 16 << 20;
    absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
        ReplicatedState::Open(options);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : nullptr;
  }

  // A fetch that fails its first `failures` calls, then copies the source.
  FetchCheckpointFn FailingFetch(int failures) {
    return [this, failures](
               const std::string& address, uint64_t, const std::string& dir,
               const std::atomic<bool>*) -> absl::StatusOr<uint64_t> {
      addresses_.push_back(address);
      if (static_cast<int>(addresses_.size()) <= failures) {
        std::filesystem::create_directories(dir + "/partial");
        return absl::UnavailableError("connection refused");
      }
      return source_->Checkpoint(dir);
    };
  }

  std::string dir_;
  std::unique_ptr<ReplicatedState> source_, target_;
  std::vector<std::string> addresses_;
};

TEST_F(SnapshotTransferTest, KeepsTryingEverySourceRoundAfterRound) {
  const absl::Status s =
      InstallSnapshot(target_.get(), SnapshotDescriptor{5, 2}, {"n2", "n3"},
                      FailingFetch(3), /*rounds=*/3, absl::ZeroDuration());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(addresses_, (std::vector<std::string>{"n2", "n3", "n2", "n3"}));
  EXPECT_EQ(target_->applied_index(), 5u);
}

TEST_F(SnapshotTransferTest, GivesUpAfterTheLastRoundWithNothingChanged) {
  const absl::Status s =
      InstallSnapshot(target_.get(), SnapshotDescriptor{5, 2}, {"n2", "n3"},
                      FailingFetch(100), /*rounds=*/3, absl::ZeroDuration());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(addresses_.size(), 6u);
  EXPECT_EQ(target_->applied_index(), 0u);
  EXPECT_FALSE(std::filesystem::exists(target_->IncomingDir()));
}

TEST_F(SnapshotTransferTest, OneRoundByDefault) {
  EXPECT_FALSE(InstallSnapshot(target_.get(), SnapshotDescriptor{5, 2},
                               {"n2", "n3"}, FailingFetch(100))
                   .ok());
  EXPECT_EQ(addresses_.size(), 2u);
}

}  // namespace
}  // namespace dedup
