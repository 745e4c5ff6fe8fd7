// kSetShardMap in the replicated state: the meta group's map, a
// compare-and-set on its epoch.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/log_entry.h"
#include "storage/replicated_state.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

using ::dedup::testing::MakeTempDir;

LogEntry Entry(int64_t now_ms, std::vector<LogOp> ops) {
  LogEntry entry;
  entry.now_ms = now_ms;
  entry.ops = std::move(ops);
  return entry;
}

class ReplicatedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-shard-map");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ReplicatedState> Open(const std::string& name) {
    ReplicatedStateOptions options;
    options.path = dir_ + "/" + name;
    options.memory_budget_bytes = 16 << 20;
    absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
        ReplicatedState::Open(options);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : nullptr;
  }

  std::string dir_;
};

// The meta group's map: a compare-and-set on its epoch that every replica
// decides alike, kept across a reopen and covered by the digest.
TEST_F(ReplicatedStateTest, SetShardMapIsACompareAndSetOnTheEpoch) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<LogEntry> entries = {
      Entry(1000, {LogSetShardMap{0, 1, "one"}}),
      // Stale (expects 0, the map is at 1), then a good one in one entry.
      Entry(1000, {LogSetShardMap{0, 5, "stale"}, LogSetShardMap{1, 2, "two"}}),
      // An epoch that skips ahead is fine; the same again is refused.
      Entry(1000, {LogSetShardMap{2, 9, "nine"}, LogSetShardMap{2, 10, "x"}}),
  };
  std::vector<std::vector<bool>> accepted;
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StatusOr<AppliedEntry> applied =
        a->Apply(i + 1, entries[i], AdmitAllResults());
    ASSERT_TRUE(applied.ok()) << applied.status();
    ASSERT_TRUE(b->Apply(i + 1, entries[i], nullptr).ok());  // answers nobody
    EXPECT_TRUE(applied->shard_map_changed);
    std::vector<bool> row;
    for (const OpAnswer& answer : applied->answers) {
      if (const auto* refused = std::get_if<absl::Status>(&answer)) {
        EXPECT_EQ(refused->code(), absl::StatusCode::kFailedPrecondition);
        row.push_back(false);
      } else {
        row.push_back(std::get<bool>(answer));
      }
    }
    accepted.push_back(row);
  }
  EXPECT_EQ(accepted, (std::vector<std::vector<bool>>{
                          {true}, {false, true}, {true, false}}));
  absl::StatusOr<StateDigest> da = a->ComputeDigest();
  absl::StatusOr<StateDigest> db = b->ComputeDigest();
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_EQ(da->hash, db->hash);
  ASSERT_TRUE(a->Close().ok());
  a.reset();
  auto reopened = Open("a");
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<ReplicatedState::StoredShardMap> map = reopened->ShardMap();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch, 9u);
  EXPECT_EQ(map->map, "nine");
  // The epoch read back decides the next compare-and-set.
  absl::StatusOr<AppliedEntry> next = reopened->Apply(
      4, Entry(1000, {LogSetShardMap{9, 11, "eleven"}}), AdmitAllResults());
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(std::get<bool>(next->answers[0]));
}

TEST_F(ReplicatedStateTest, AStateWithoutAShardMapReadsEpochZero) {
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  absl::StatusOr<ReplicatedState::StoredShardMap> map = state->ShardMap();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch, 0u);
  EXPECT_EQ(map->map, "");
}

}  // namespace
}  // namespace dedup
