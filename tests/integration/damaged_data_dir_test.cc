// A damaged or incomplete data dir never starts silently with acknowledged
// data missing: dedupd exits with code 3 and a message naming the file at
// fault and what to do, or (a torn WAL tail after a crash, which only ever
// holds a write nobody was told about) starts with every acknowledged record.
//
// Each case writes acknowledged records with the real server (durability
// sync), SIGKILLs it so the WAL holds them, damages the directory the way
// the case says and runs dedupd on it again.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

namespace fs = std::filesystem;
using v1::BeginResponse;
using v1::CompleteResponse;

constexpr char kMarker[] = "DEDUP-DURABLE";

// A data dir holding acknowledged records, left as a SIGKILL left it.
class DamagedDataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-damaged");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir + "/data";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(fs::path(dir_).parent_path(), ignored);
  }

  // Writes `records` acknowledged Completes, then SIGKILLs the server. With
  // `with_tables`, a compaction first moves the records into a table file
  // and 10 more are written after it, so the WAL is not empty either.
  void WriteThenCrash(int records, bool with_tables) {
    DEDUP_START_SERVER(server, {}, dir_);
    TestClient c(server->address());
    auto write = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        const std::string key = absl::StrCat("acked-", i);
        const BeginResponse began = c.Begin(key, "writer");
        ASSERT_EQ(began.status(), BeginResponse::STARTED) << key;
        const std::string result = absl::StrCat("result-of-", key);
        ASSERT_EQ(c.Complete(key, began.fence(), result).status(),
                  CompleteResponse::OK)
            << key;
        acked_[key] = result;
      }
    };
    write(0, records);
    if (with_tables) {
      auto admin = v1::Admin::NewStub(grpc::CreateChannel(
          server->address(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      SetDeadline(&ctx, 30'000);
      v1::CompactResponse compacted;
      const grpc::Status s =
          admin->Compact(&ctx, v1::CompactRequest(), &compacted);
      ASSERT_TRUE(s.ok()) << s.error_message();
      write(records, records + 10);
      ASSERT_FALSE(Files("", ".sst").empty())
          << "the compaction wrote no table";
    }
    c.Disconnect();
    server->Kill();
  }

  // Paths of the data dir's files named <prefix>...<suffix>, sorted.
  std::vector<std::string> Files(absl::string_view prefix,
                                 absl::string_view suffix) const {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, prefix) && absl::EndsWith(name, suffix)) {
        found.push_back(entry.path().string());
      }
    }
    std::sort(found.begin(), found.end());
    return found;
  }
  // The newest WAL file (there is one after a crash).
  std::string Wal() const {
    const std::vector<std::string> wals = Files("", ".log");
    EXPECT_FALSE(wals.empty()) << "no WAL file in " << dir_;
    return wals.empty() ? "" : wals.back();
  }

  // Every file of the data dir with its size and bytes, to show that a
  // refused start changed nothing.
  std::map<std::string, std::string> Snapshot() const {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename() == "LOCK") continue;  // taken and released
      std::ifstream in(entry.path(), std::ios::binary);
      files[entry.path().filename().string()] =
          std::string(std::istreambuf_iterator<char>(in), {});
    }
    return files;
  }

  // dedupd run on the damaged dir until it exits by itself (it should).
  ProcessResult RunOnDir() {
    absl::StatusOr<ProcessResult> r =
        RunProcess(ServerBinary(), {"--address=127.0.0.1:0",
                                    "--metrics_address=", "--event_log=off",
                                    "--data_dir=" + dir_});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return ProcessResult{};
    EXPECT_FALSE(r->timed_out) << "dedupd started on a damaged data dir:\n"
                               << r->output;
    return *r;
  }

  // Starts dedupd on the dir and checks that every acknowledged record is
  // there, as written, and that new writes get higher fences.
  void ExpectStartsWithEveryAcknowledgedRecord() {
    DEDUP_START_SERVER(server, {}, dir_);
    TestClient c(server->address());
    int missing = 0;
    for (const auto& [key, result] : acked_) {
      const v1::GetResponse got = c.Get(key);
      if (!got.found() || got.record().result() != result) {
        if (++missing <= 5)
          ADD_FAILURE() << key << " lost: " << got.DebugString();
      }
    }
    EXPECT_EQ(missing, 0) << "of " << acked_.size() << " acknowledged";
    EXPECT_EQ(c.Begin("new-after-restart", "w").status(),
              BeginResponse::STARTED);
    c.Disconnect();
    const absl::Status stopped = server->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }

  // Flips one byte of `path` at `offset` (negative: from the end).
  static void FlipByte(const std::string& path, long offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekg(0, std::ios::end);
    const long size = static_cast<long>(f.tellg());
    const long at = offset < 0 ? size + offset : offset;
    ASSERT_TRUE(at >= 0 && at < size) << path << " is " << size << " bytes";
    char byte = 0;
    f.seekg(at);
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0xff);
    f.seekp(at);
    f.write(&byte, 1);
  }

  static void Truncate(const std::string& path, uintmax_t size) {
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
  }

  std::string dir_;
  std::map<std::string, std::string> acked_;  // key -> result
};

// dedupd exited with code 3 and a message saying each of `needles`.
void ExpectRefused(const ProcessResult& result,
                   const std::vector<std::string>& needles) {
  EXPECT_EQ(result.exit_code, 3) << result.output;
  for (const std::string& needle : needles) {
    EXPECT_TRUE(absl::StrContains(result.output, needle))
        << "the message should say \"" << needle << "\"; got:\n"
        << result.output;
  }
}

TEST_F(DamagedDataDirTest, WalCutInHalfIsRefusedNamingItAndLeftAsFound) {
  WriteThenCrash(200, /*with_tables=*/false);
  const std::string wal = Wal();
  Truncate(wal, fs::file_size(wal) / 2);
  const std::map<std::string, std::string> before = Snapshot();

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {wal, "lost acknowledged writes", "cut short",
                    "Restore the data dir from a backup or a replica",
                    std::string(dir_) + "/" + kMarker});
  // Read-only until it was sure: the evidence is still there, byte for byte.
  EXPECT_TRUE(Snapshot() == before) << "the refused start changed the dir";
}

TEST_F(DamagedDataDirTest, WalDeletedIsRefusedNamingIt) {
  WriteThenCrash(200, /*with_tables=*/false);
  const std::string wal = Wal();
  ASSERT_EQ(std::remove(wal.c_str()), 0);

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {wal, "lost acknowledged writes", "is missing"});
}

// RocksDB itself would create a new, empty database beside the old files
// and hand out fences from 1 again.
TEST_F(DamagedDataDirTest, CurrentAndWalDeletedIsRefusedNotRecreatedEmpty) {
  WriteThenCrash(200, /*with_tables=*/true);
  ASSERT_EQ(std::remove(Wal().c_str()), 0);
  ASSERT_EQ(std::remove((dir_ + "/CURRENT").c_str()), 0);

  const ProcessResult r = RunOnDir();
  ExpectRefused(
      r, {"CURRENT file is missing", "MANIFEST-", "move the directory away"});
  EXPECT_FALSE(fs::exists(dir_ + "/CURRENT")) << "a new database was created";
}

TEST_F(DamagedDataDirTest, ManifestDeletedIsRefusedNamingIt) {
  WriteThenCrash(200, /*with_tables=*/true);
  const std::vector<std::string> manifests = Files("MANIFEST-", "");
  ASSERT_EQ(manifests.size(), 1u);
  ASSERT_EQ(std::remove(manifests[0].c_str()), 0);

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {manifests[0], "Restore the data dir"});
}

// RocksDB reports these as a problem "in file MANIFEST-...", or without
// naming any file: the message must name the table.
TEST_F(DamagedDataDirTest, FlippedByteInTableFooterIsRefusedNamingTheTable) {
  WriteThenCrash(200, /*with_tables=*/true);
  const std::string table = Files("", ".sst").front();
  FlipByte(table, -9);  // in the footer's format version

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {"is damaged: table file " + table, "Corruption",
                    "Restore the data dir"});
}

TEST_F(DamagedDataDirTest, FlippedByteInTableDataBlockIsRefusedNamingIt) {
  WriteThenCrash(200, /*with_tables=*/true);
  const std::string table = Files("", ".sst").front();
  FlipByte(table, 100);  // inside the first data block

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {"is damaged: table file " + table, "checksum mismatch"});
}

// What a crash in the middle of a WAL append leaves: a partial record after
// the last synced one. It was never acknowledged; the start goes on.
TEST_F(DamagedDataDirTest, TornWalTailAfterACrashStartsWithEveryAckedRecord) {
  WriteThenCrash(200, /*with_tables=*/false);
  {
    std::ofstream wal(Wal(), std::ios::binary | std::ios::app);
    // A record header announcing more bytes than follow, then a few.
    const char torn[] = "\x12\x34\x56\x78\x00\x40\x01partial";
    wal.write(torn, sizeof(torn) - 1);
  }
  ExpectStartsWithEveryAcknowledgedRecord();
  // And again: the start cleaned the torn tail up for good.
  ExpectStartsWithEveryAcknowledgedRecord();
}

// The last few bytes of the WAL hold the last acknowledged Complete: cutting
// them loses it, unlike a torn tail.
TEST_F(DamagedDataDirTest, LastAcknowledgedRecordCutFromTheWalIsRefused) {
  WriteThenCrash(200, /*with_tables=*/false);
  const std::string wal = Wal();
  Truncate(wal, fs::file_size(wal) - 5);

  const ProcessResult r = RunOnDir();
  ExpectRefused(r, {wal, "lost acknowledged writes"});
}

// The way out the message offers: delete the marker to accept the loss.
TEST_F(DamagedDataDirTest, DeletingTheMarkerAcceptsTheLossAndStarts) {
  WriteThenCrash(200, /*with_tables=*/false);
  const std::string wal = Wal();
  Truncate(wal, fs::file_size(wal) / 2);
  ASSERT_EQ(RunOnDir().exit_code, 3);
  ASSERT_EQ(std::remove((dir_ + "/" + kMarker).c_str()), 0);

  DEDUP_START_SERVER(server, {}, dir_);
  TestClient c(server->address());
  EXPECT_TRUE(c.Get("acked-0").found()) << "the first half should be there";
  EXPECT_FALSE(c.Get("acked-199").found()) << "the cut part cannot be";
  c.Disconnect();
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
  EXPECT_TRUE(fs::exists(dir_ + "/" + kMarker)) << "a new marker is written";
}

// A crash with nothing damaged starts as before, tables and WAL alike.
TEST_F(DamagedDataDirTest, UndamagedDirAfterACrashStarts) {
  WriteThenCrash(200, /*with_tables=*/true);
  ExpectStartsWithEveryAcknowledgedRecord();
}

}  // namespace
}  // namespace dedup::testing
