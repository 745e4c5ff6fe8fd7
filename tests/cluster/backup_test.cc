// Online backup and restore against real processes: `dedupctl backup` of a
// node (single, and a group's leader) while writers Begin and Complete
// keys, then `dedupd --restore_from` into a new single node and into a new
// 3-node group. Every Complete acknowledged before the backup started
// replays (DUPLICATE with its result), every execution acknowledged as
// STARTED before it keeps its fence (IN_USE to another owner), and the new
// group's replicas hold the same state. A damaged or missing backup file, a
// backup without its manifest and a non-empty data dir are refused (exit 8)
// naming what is wrong.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::dedup::testing::ProcessResult;
using ::dedup::testing::RunProcess;
using ::dedup::testing::ServerProcess;

// Long enough to outlive the test: an execution left STARTED stays owned.
constexpr int kLeaseMs = 30 * 60 * 1000;
constexpr int kWriters = 4;

// What the writers were told, with when they were told it.
struct Acknowledged {
  Clock::time_point at;
  uint64_t fence = 0;
  std::string result;  // Completes only
};

class Ledger {
 public:
  void Completed(const std::string& key, uint64_t fence, std::string result) {
    std::lock_guard<std::mutex> lock(mu_);
    completed_[key] = {Clock::now(), fence, std::move(result)};
  }
  void Started(const std::string& key, uint64_t fence) {
    std::lock_guard<std::mutex> lock(mu_);
    started_[key] = {Clock::now(), fence, ""};
  }
  // The Completes (or Starts) acknowledged before `t`, and how many after.
  std::map<std::string, Acknowledged> CompletedBefore(Clock::time_point t,
                                                      size_t* after) const {
    return Before(completed_, t, after);
  }
  std::map<std::string, Acknowledged> StartedBefore(Clock::time_point t) const {
    size_t after = 0;
    return Before(started_, t, &after);
  }

 private:
  std::map<std::string, Acknowledged> Before(
      const std::map<std::string, Acknowledged>& all, Clock::time_point t,
      size_t* after) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, Acknowledged> out;
    *after = 0;
    for (const auto& [key, ack] : all) {
      if (ack.at < t) {
        out[key] = ack;
      } else {
        ++*after;
      }
    }
    return out;
  }

  mutable std::mutex mu_;
  std::map<std::string, Acknowledged> completed_;
  std::map<std::string, Acknowledged> started_;
};

// Writers Beginning and Completing keys through `address` (following the
// leader) until stopped; every fifth key is left STARTED.
class Load {
 public:
  explicit Load(std::string address) : address_(std::move(address)) {
    for (int w = 0; w < kWriters; ++w) {
      threads_.emplace_back([this, w] { Write(w); });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  const Ledger& ledger() const { return ledger_; }

 private:
  void Write(int writer) {
    for (int i = 0; !stop_.load(); ++i) {
      const std::string key = absl::StrCat("w", writer, "-", i);
      v1::BeginRequest begin = BeginOf(key, "writer");
      begin.set_lease_ms(kLeaseMs);
      v1::BeginResponse begun;
      grpc::Status s = Call(address_, &v1::Dedup::Stub::Begin, begin, &begun);
      if (!s.ok() || begun.status() != v1::BeginResponse::STARTED) continue;
      if (i % 5 == 4) {
        ledger_.Started(key, begun.fence());
        continue;
      }
      const v1::CompleteRequest complete =
          CompleteOf(key, begun.fence(), absl::StrCat("result-", key));
      v1::CompleteResponse completed;
      s = Call(address_, &v1::Dedup::Stub::Complete, complete, &completed);
      if (s.ok() && completed.status() == v1::CompleteResponse::OK) {
        ledger_.Completed(key, begun.fence(), complete.result());
      }
    }
  }

  const std::string address_;
  std::atomic<bool> stop_{false};
  Ledger ledger_;
  std::vector<std::thread> threads_;
};

// Temp dirs of this process, removed when the tests end.
std::vector<std::string>& TempDirs() {
  static auto* const dirs = new std::vector<std::string>();
  return *dirs;
}

class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const std::string& dir : TempDirs()) fs::remove_all(dir, ec);
  }
};
const auto* const kRemoveTempDirs =
    ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);

// A path named `name` in a new temp dir (the path itself is not created).
std::string TempPath(const std::string& name) {
  absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-backup");
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (dir.ok()) TempDirs().push_back(*dir);
  return absl::StrCat(*dir, "/", name);
}

ProcessResult Ctl(const std::vector<std::string>& args) {
  absl::StatusOr<ProcessResult> run =
      RunProcess(DEDUPCTL_BINARY, args, std::chrono::seconds(120));
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : ProcessResult();
}

// When a backup ran.
struct Window {
  Clock::time_point started;
  Clock::time_point finished;
};

// dedupctl backup DIR against `addresses` (a group's through -o json, whose
// summary must name the cluster's copy).
Window Backup(const std::vector<std::string>& addresses,
              const std::string& dir) {
  const bool json = addresses.size() > 1;
  std::vector<std::string> args = {
      absl::StrCat("--address=", absl::StrJoin(addresses, ","))};
  if (json) args.push_back("--output=json");
  args.push_back("backup");
  args.push_back(dir);
  Window window;
  window.started = Clock::now();
  const ProcessResult run = Ctl(args);
  window.finished = Clock::now();
  EXPECT_EQ(run.exit_code, 0) << run.output;
  if (json) {
    const nlohmann::json summary =
        nlohmann::json::parse(run.output, nullptr, /*allow_exceptions=*/false);
    EXPECT_EQ(summary.value("mode", ""), "cluster") << run.output;
    EXPECT_NE(summary.value("files", "0"), "0") << run.output;
    EXPECT_NE(summary.value("appliedIndex", "0"), "0") << run.output;
  } else {
    EXPECT_NE(run.output.find("files: "), std::string::npos) << run.output;
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / "dedup-backup.json"));
  return window;
}

// Every Complete acknowledged before `t` replays through `address`, and
// every STARTED acknowledged before `t` is still owned (IN_USE to someone
// else, with its fence).
void ExpectEveryAcknowledgedWrite(const std::string& address,
                                  const Ledger& ledger, Clock::time_point t) {
  size_t after = 0;
  const auto completed = ledger.CompletedBefore(t, &after);
  const auto started = ledger.StartedBefore(t);
  ASSERT_GT(completed.size(), 20u);
  ASSERT_GT(started.size(), 2u);
  for (const auto& [key, ack] : completed) {
    v1::BeginResponse begun;
    grpc::Status s =
        Call(address, &v1::Dedup::Stub::Begin, BeginOf(key, "checker"), &begun);
    ASSERT_TRUE(s.ok()) << key << ": " << s.error_message();
    EXPECT_EQ(begun.status(), v1::BeginResponse::DUPLICATE) << key;
    EXPECT_EQ(begun.result(), ack.result) << key;
    EXPECT_EQ(begun.fence(), ack.fence) << key;
  }
  for (const auto& [key, ack] : started) {
    v1::BeginResponse begun;
    grpc::Status s =
        Call(address, &v1::Dedup::Stub::Begin, BeginOf(key, "checker"), &begun);
    ASSERT_TRUE(s.ok()) << key << ": " << s.error_message();
    EXPECT_EQ(begun.status(), v1::BeginResponse::IN_USE) << key;
    EXPECT_EQ(begun.fence(), ack.fence) << key;
  }
}

// The backup ran while the writers did: some of their Completes were
// acknowledged while it ran.
void ExpectLoadDuringBackup(const Ledger& ledger, const Window& window) {
  size_t after_start = 0;
  size_t after_end = 0;
  (void)ledger.CompletedBefore(window.started, &after_start);
  (void)ledger.CompletedBefore(window.finished, &after_end);
  EXPECT_GT(after_start - after_end, 0u);
}

TEST(BackupTest, SingleNodeBackupUnderLoadRestoresEveryAcknowledgedWrite) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({"--event_log=off"});
  ASSERT_TRUE(server.ok()) << server.status();
  Load load((*server)->address());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string dir = TempPath("backup");
  const Window backup = Backup({(*server)->address()}, dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  load.Stop();
  ExpectLoadDuringBackup(load.ledger(), backup);

  absl::StatusOr<std::unique_ptr<ServerProcess>> restored =
      ServerProcess::Start(
          {"--event_log=off", absl::StrCat("--restore_from=", dir)});
  ASSERT_TRUE(restored.ok()) << restored.status();
  ExpectEveryAcknowledgedWrite((*restored)->address(), load.ledger(),
                               backup.started);
  EXPECT_FALSE(
      fs::exists(fs::path((*restored)->data_dir()) / "RESTORE-IN-PROGRESS"));
  // The backup's format is recorded (storage/format_version.h).
  std::ifstream format(fs::path((*restored)->data_dir()) / "DEDUP-FORMAT");
  std::string version;
  std::getline(format, version);
  EXPECT_EQ(version, "1");
  // The restored node serves new work, with fences past every old one.
  v1::BeginResponse begun;
  ASSERT_TRUE(Call((*restored)->address(), &v1::Dedup::Stub::Begin,
                   BeginOf("fresh", "checker"), &begun)
                  .ok());
  EXPECT_EQ(begun.status(), v1::BeginResponse::STARTED);
}

TEST(BackupTest, GroupBackupUnderLoadSeedsANewGroup) {
  ClusterHarness group(3);
  ASSERT_TRUE(group.StartAll().ok());
  absl::StatusOr<int> leader = group.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  Load load(group.client_address(*leader));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string dir = TempPath("backup");
  // Every address: dedupctl finds the leader among them.
  const Window backup =
      Backup({group.client_address(1), group.client_address(2),
              group.client_address(3)},
             dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  load.Stop();
  ExpectLoadDuringBackup(load.ledger(), backup);

  // A new group: node 1 restored alone, then two nodes added.
  ClusterHarness fresh(1);
  ASSERT_TRUE(fresh.Start(1, {absl::StrCat("--restore_from=", dir)}).ok());
  ASSERT_TRUE(fresh.WaitForLeader().ok());
  for (int n = 0; n < 2; ++n) {
    const int joiner = fresh.AddJoiner();
    ASSERT_TRUE(fresh.Start(joiner).ok());
    v1::AddNodeRequest add;
    add.set_node_id(joiner);
    add.set_raft_address(fresh.raft_address(joiner));
    add.set_client_address(fresh.client_address(joiner));
    v1::AddNodeResponse added;
    grpc::Status s = CallService<v1::Cluster>(
        fresh.client_address(1), &v1::Cluster::Stub::AddNode, add, &added);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ExpectEveryAcknowledgedWrite(fresh.client_address(1), load.ledger(),
                               backup.started);
  absl::StatusOr<std::vector<v1::DigestResponse>> digests =
      fresh.ConvergedDigests();
  ASSERT_TRUE(digests.ok()) << digests.status();
  ASSERT_EQ(digests->size(), 3u);
  for (const v1::DigestResponse& d : *digests) {
    EXPECT_EQ(d.digest(), digests->front().digest());
    EXPECT_EQ(d.live_records(), digests->front().live_records());
  }
  size_t after = 0;
  EXPECT_GE(digests->front().live_records(),
            load.ledger().CompletedBefore(backup.started, &after).size());
  for (int id : {2, 3}) {
    EXPECT_NE(fresh.process(id)->captured_stderr().find("installed a snapshot"),
              std::string::npos)
        << fresh.process(id)->captured_stderr();
  }
}

// Refusals: a small backup of an idle node, then restores that must fail.
class RestoreRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({"--event_log=off"});
    ASSERT_TRUE(server.ok()) << server.status();
    v1::BeginResponse begun;
    ASSERT_TRUE(Call((*server)->address(), &v1::Dedup::Stub::Begin,
                     BeginOf("k", "w"), &begun)
                    .ok());
    backup_ = TempPath("backup");
    (void)Backup({(*server)->address()}, backup_);
    data_dir_ = TempPath("data");
  }

  // dedupd --restore_from=backup_ --data_dir=data_dir_, expected to exit.
  ProcessResult Restore() {
    absl::StatusOr<ProcessResult> run = RunProcess(
        testing::ServerBinary(),
        {absl::StrCat("--restore_from=", backup_),
         absl::StrCat("--data_dir=", data_dir_), "--address=127.0.0.1:0",
         "--event_log=off", "--metrics_address=", "--health_address="});
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *run : ProcessResult();
  }

  std::string FileEndingWith(const std::string& suffix) {
    for (const fs::directory_entry& e : fs::directory_iterator(backup_)) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
              0) {
        return e.path().string();
      }
    }
    ADD_FAILURE() << "no *" << suffix << " in " << backup_;
    return "";
  }

  void ExpectRefused(const ProcessResult& run, const std::string& names) {
    EXPECT_EQ(run.exit_code, exit_code::kRestoreRefused) << run.output;
    EXPECT_NE(run.output.find(names), std::string::npos) << run.output;
    // Nothing was written.
    EXPECT_TRUE(!fs::exists(data_dir_) || fs::is_empty(data_dir_)) << data_dir_;
  }

  std::string backup_;
  std::string data_dir_;
};

TEST_F(RestoreRefusalTest, ADamagedTableFileIsRefusedByName) {
  const std::string sst = FileEndingWith(".sst");
  std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(10);
  char byte = 0;
  f.read(&byte, 1);
  byte ^= 0x01;
  f.seekp(10);
  f.write(&byte, 1);
  f.close();
  ExpectRefused(Restore(), absl::StrCat(sst, " is damaged"));
}

TEST_F(RestoreRefusalTest, AMissingFileIsRefusedByName) {
  std::string victim;
  for (const fs::directory_entry& e : fs::directory_iterator(backup_)) {
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) {
      victim = e.path().string();
    }
  }
  ASSERT_FALSE(victim.empty());
  fs::remove(victim);
  ExpectRefused(Restore(), absl::StrCat(victim, " is missing"));
}

TEST_F(RestoreRefusalTest, ABackupWithoutItsManifestIsRefused) {
  fs::remove(fs::path(backup_) / "dedup-backup.json");
  ExpectRefused(Restore(), "has no readable dedup-backup.json");
}

TEST_F(RestoreRefusalTest, ANonEmptyDataDirIsRefusedAndLeftAlone) {
  fs::create_directories(data_dir_);
  std::ofstream(fs::path(data_dir_) / "precious") << "keep";
  const ProcessResult run = Restore();
  EXPECT_EQ(run.exit_code, exit_code::kRestoreRefused) << run.output;
  EXPECT_NE(run.output.find("is not empty (it holds precious)"),
            std::string::npos)
      << run.output;
  std::vector<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(data_dir_)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"precious"});
}

}  // namespace
}  // namespace dedup

namespace dedup {
namespace {

// A restore cut short leaves its marker: a plain start refuses the dir.
TEST_F(RestoreRefusalTest, AStartOnAnUnfinishedRestoreIsRefused) {
  fs::create_directories(data_dir_);
  std::ofstream(fs::path(data_dir_) / "RESTORE-IN-PROGRESS") << backup_;
  absl::StatusOr<ProcessResult> run = RunProcess(
      testing::ServerBinary(),
      {absl::StrCat("--data_dir=", data_dir_), "--address=127.0.0.1:0",
       "--event_log=off", "--metrics_address=", "--health_address="});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, exit_code::kDataDir) << run->output;
  EXPECT_NE(run->output.find("holds an unfinished restore"), std::string::npos)
      << run->output;
}

}  // namespace
}  // namespace dedup
