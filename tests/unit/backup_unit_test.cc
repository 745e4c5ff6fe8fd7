// The pieces of a backup without a network: the manifest's encoding, the
// writer and the verification of a backup dir (common/backup_manifest.h),
// the single-node copy a backup streams (server/backup_source.h) and the
// Raft log a restored group starts from (replication/raft_seed.h).
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/backup_manifest.h"
#include "gtest/gtest.h"
#include "replication/raft_log_probe.h"
#include "replication/raft_seed.h"
#include "server/backup_source.h"
#include "storage/replicated_state.h"
#include "storage/restored_state.h"
#include "storage/storage_key.h"
#include "storage/store.h"
#include "tests/testing/server_process.h"
#include "tests/unit/store_test_util.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;
using ::dedup::testing::BeginSync;
using ::dedup::testing::GetSync;
using ::dedup::testing::MakeBeginParams;

class BackupUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-backup-unit");
    ASSERT_TRUE(dir.ok()) << dir.status();
    root_ = *dir;
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string root_;
};

BackupManifest SampleManifest() {
  BackupManifest m;
  m.data_format_version = 1;
  m.mode = "cluster";
  m.node_id = 2;
  m.applied_index = 1234;
  m.term = 7;
  m.members = {{1, "127.0.0.1:7001", "127.0.0.1:50051", "voter"},
               {2, "127.0.0.2:7001", "", "standby"}};
  m.estimated_records = 99;
  m.created_at_ms = 1764236400123;
  m.dedup_version = "0.1.0";
  m.git_sha = "abc";
  m.files = {{"000009.sst", 12, std::string(64, 'a')}};
  return m;
}

TEST_F(BackupUnitTest, ManifestRoundTripsWithStableFieldNames) {
  const std::string text = EncodeManifest(SampleManifest());
  for (const char* field :
       {"\"format\": \"dedup-backup/1\"", "\"data_format_version\": 1",
        "\"applied_index\": 1234",
        "\"created_at\": \"2025-11-27T09:40:00.123Z\"", "\"sha256\"",
        "\"raft_address\""}) {
    EXPECT_NE(text.find(field), std::string::npos) << field << "\n" << text;
  }
  absl::StatusOr<BackupManifest> back = DecodeManifest(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(EncodeManifest(*back), text);
}

TEST_F(BackupUnitTest, ManifestDecodingRefusesWhatItCannotTrust) {
  EXPECT_FALSE(DecodeManifest("not json").ok());
  std::string other = EncodeManifest(SampleManifest());
  other.replace(other.find("dedup-backup/1"), 14, "dedup-backup/9");
  EXPECT_FALSE(DecodeManifest(other).ok());
  std::string escaping = EncodeManifest(SampleManifest());
  escaping.replace(escaping.find("000009.sst"), 10, "../x.sst..");
  absl::StatusOr<BackupManifest> bad = DecodeManifest(escaping);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad file name"), std::string::npos);
}

TEST_F(BackupUnitTest, WrittenBackupVerifiesAndADamagedOneIsNamed) {
  const std::string dir = root_ + "/b";
  absl::StatusOr<std::unique_ptr<BackupWriter>> writer =
      BackupWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->StartFile("a", 6).ok());
  ASSERT_TRUE((*writer)->Append("abc").ok());
  ASSERT_TRUE((*writer)->Append("def").ok());
  EXPECT_FALSE((*writer)->Append("g").ok());  // past its size
  ASSERT_TRUE((*writer)->StartFile("CURRENT", 0).ok());
  BackupManifest m;
  m.mode = "single";
  m.data_format_version = 1;
  ASSERT_TRUE((*writer)->Finish(m).ok());
  absl::StatusOr<BackupManifest> verified = VerifyBackup(dir);
  ASSERT_TRUE(verified.ok()) << verified.status();
  ASSERT_EQ(verified->files.size(), 2u);
  // SHA-256("abcdef").
  EXPECT_EQ(verified->files[0].sha256,
            "bef57ec7f53a6d40beb640a780a639c83bc29ac8a9816f1fc6c5c6dcd93c4721");
  // A second backup into the same, now full, directory is refused.
  EXPECT_FALSE(BackupWriter::Create(dir).ok());

  std::ofstream(dir + "/a", std::ios::trunc) << "abcdeF";
  absl::StatusOr<BackupManifest> damaged = VerifyBackup(dir);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(dir + "/a is damaged"),
            std::string::npos)
      << damaged.status();
  fs::remove(dir + "/a");
  EXPECT_NE(VerifyBackup(dir).status().message().find(dir + "/a is missing"),
            std::string::npos);
}

TEST_F(BackupUnitTest, SingleNodeCopyHoldsEarlierWritesAndTheClockTime) {
  FakeClock clock(1764236400000);
  StoreOptions options;
  options.path = root_ + "/data";
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto begun = BeginSync(**store, "k", MakeBeginParams("o"));
  ASSERT_TRUE(begun.ok());
  BackupSource source;
  source.store = store->get();
  source.scratch_dir = options.path + "/backup-checkpoint";
  source.clock = &clock;
  source.version = "9.9.9";
  v1::BackupInfo info;
  absl::StatusOr<OutgoingCheckpoint> copy = MakeBackup(source, &info);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(info.mode(), "single");
  EXPECT_EQ(info.created_at_ms(), 1764236400000);
  EXPECT_EQ(info.version(), "9.9.9");
  EXPECT_EQ(info.format_version(), 1u);
  // The copy opens as a store of its own, with the record written before.
  ASSERT_TRUE((*store)->Close().ok());
  StoreOptions copied = options;
  copied.path = copy->dir;
  absl::StatusOr<std::unique_ptr<Store>> reopened = Store::Open(copied);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto got = GetSync(**reopened, "k");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->has_value());
}

TEST_F(BackupUnitTest, RestoredStateForgetsTheOldGroupsMembersAndMapOnly) {
  ReplicatedStateOptions options;
  options.path = root_ + "/state";
  options.memory_budget_bytes = 16 << 20;
  {
    absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
        ReplicatedState::Open(options);
    ASSERT_TRUE(state.ok()) << state.status();
    LogSetMember member;
    member.member_id = 4;
    member.client_address = "10.0.0.4:50051";
    LogBegin begin;
    begin.skey = EncodeStorageKey("ns", "k");
    begin.params.owner = "o";
    begin.params.args_hash = "h";
    begin.params.lease_ms = 10000;
    begin.params.ttl_s = 3600;
    LogSetShardMap map;
    map.expected_epoch = 0;
    map.epoch = 3;
    map.map = "the old cluster's map";
    LogEntry entry;
    entry.now_ms = 1000;
    entry.ops = {member, begin, map};
    ASSERT_TRUE((*state)->Apply(7, entry).ok());
    absl::StatusOr<std::map<uint64_t, std::string>> members =
        (*state)->Members();
    ASSERT_TRUE(members.ok());
    ASSERT_EQ(members->size(), 1u);
    ASSERT_EQ((*state)->ShardMap()->epoch, 3u);
    ASSERT_TRUE((*state)->Close().ok());
  }
  ASSERT_TRUE(ForgetRecordedMembers(options.path).ok());
  absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
      ReplicatedState::Open(options);
  ASSERT_TRUE(state.ok()) << state.status();
  absl::StatusOr<std::map<uint64_t, std::string>> members = (*state)->Members();
  ASSERT_TRUE(members.ok());
  EXPECT_TRUE(members->empty());
  EXPECT_EQ((*state)->applied_index(), 7u);
  // The old cluster's shard map goes too: a new map can be founded.
  absl::StatusOr<ReplicatedState::StoredShardMap> map = (*state)->ShardMap();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch, 0u);
  EXPECT_TRUE(map->map.empty());
  LogSetShardMap founding;
  founding.expected_epoch = 0;
  founding.epoch = 1;
  founding.map = "the new cluster's map";
  LogEntry entry;
  entry.now_ms = 2000;
  entry.ops = {founding};
  ASSERT_TRUE((*state)->Apply(8, entry).ok());
  EXPECT_EQ((*state)->ShardMap()->epoch, 1u);
  EXPECT_EQ((*state)->applied_index(), 8u);
  EXPECT_EQ((*state)->last_fence(), 1u);
}

TEST_F(BackupUnitTest, SeededRaftLogStartsWithTheSnapshotAlone) {
  const std::string dir = root_ + "/raft";
  fs::create_directories(dir);
  ASSERT_TRUE(
      SeedRaftLog(dir, 4, "127.0.0.1:7004", 5000, "dedup-snapshot/1 5000 4")
          .ok());
  absl::StatusOr<RaftLogSummary> log = ReadRaftLog(dir, 4, "127.0.0.1:7004");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->current_term, 1u);
  EXPECT_EQ(log->last_index, 5000u);
  EXPECT_EQ(log->last_term, 1u);
  ASSERT_EQ(log->members.size(), 1u);
  EXPECT_EQ(log->members[0].id, 4u);
  EXPECT_EQ(log->members[0].raft_address, "127.0.0.1:7004");
  EXPECT_EQ(log->config_index, 5000u);
  // Only a pristine log is seeded.
  EXPECT_FALSE(
      SeedRaftLog(dir, 4, "127.0.0.1:7004", 6000, "dedup-snapshot/1 6000 4")
          .ok());
}

}  // namespace
}  // namespace dedup
