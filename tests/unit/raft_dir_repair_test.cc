// raft_dir_repair on raft dirs written by libraft 0.15 itself: a 1-node
// group run through StartRaft, and libraft's own truncation and term write
// for the states a power cut leaves behind.
#include "replication/raft_dir_repair.h"

#include <uv.h>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "replication/raft_consensus.h"
#include "replication/raft_log_probe.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace raft_dir_repair_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

// Records what the engine applies, by index.
class Recorder : public StateMachine {
 public:
  absl::Status Apply(uint64_t index, absl::string_view entry) override {
    absl::MutexLock lock(&mu_);
    applied_[index] = std::string(entry);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Snapshot() override {
    return std::string("snapshot");
  }
  bool PrepareSnapshot(absl::string_view) override { return true; }
  absl::Status Restore(absl::string_view) override { return absl::OkStatus(); }
  void Tick(const ConsensusStatus&) override {}

  std::map<uint64_t, std::string> applied() const {
    absl::MutexLock lock(&mu_);
    return applied_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::string> applied_ ABSL_GUARDED_BY(mu_);
};

// A 1-node group in `dir`, its only voter (a founder).
struct Node {
  std::string dir;
  std::string address;
  unsigned snapshot_threshold = 65536;
  unsigned snapshot_trailing = 4096;

  absl::StatusOr<std::unique_ptr<Consensus>> Start(Recorder* machine) const {
    RaftOptions options;
    options.id = 1;
    options.raft_address = address;
    options.dir = dir;
    options.bootstrap = {Member{1, address, MemberRole::kVoter, 0}};
    options.election_timeout_ms = 100;
    options.heartbeat_timeout_ms = 20;
    options.snapshot_threshold = snapshot_threshold;
    options.snapshot_trailing = snapshot_trailing;
    return StartRaft(options, machine);
  }
};

bool WaitForLeader(const Consensus& consensus) {
  for (int i = 0; i < 500; ++i) {
    if (consensus.Status().role == Role::kLeader) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

absl::Status ProposeAndWait(Consensus& consensus, const std::string& entry) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> done = promise->get_future();
  consensus.Post([&consensus, entry, promise]() mutable {
    absl::Status s = consensus.Propose(
        entry, [promise](absl::Status status) { promise->set_value(status); });
    if (!s.ok()) promise->set_value(s);
  });
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return absl::DeadlineExceededError("proposal not applied");
  }
  return done.get();
}

// Starts the node, proposes `n` entries, stops it; what it applied goes to
// `applied`. Entries are 8 bytes, as dedup's are padded to a multiple of 8
// (storage/log_entry.cc: libraft 0.15 mishandles other lengths).
void RunAndPropose(const Node& node, int run, int n,
                   std::map<uint64_t, std::string>* applied) {
  Recorder machine;
  absl::StatusOr<std::unique_ptr<Consensus>> consensus = node.Start(&machine);
  ASSERT_TRUE(consensus.ok()) << consensus.status();
  ASSERT_TRUE(WaitForLeader(**consensus));
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(
        ProposeAndWait(**consensus, absl::StrFormat("r%dn%05d", run, i)).ok());
  }
  (*consensus)->Stop();
  for (const auto& [index, entry] : machine.applied()) {
    (*applied)[index] = entry;
  }
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

// Every file in `dir` by name, with its bytes.
std::map<std::string, std::string> Contents(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path());
  }
  return files;
}

struct Closed {
  unsigned long long first = 0;
  unsigned long long end = 0;
  std::string name;
};

std::vector<Closed> ClosedSegments(const std::string& dir) {
  std::vector<Closed> closed;
  for (const auto& [name, bytes] : Contents(dir)) {
    Closed segment;
    int consumed = 0;
    if (std::sscanf(name.c_str(), "%16llu-%16llu%n", &segment.first,
                    &segment.end, &consumed) == 2 &&
        consumed == static_cast<int>(name.size())) {
      segment.name = name;
      closed.push_back(segment);
    }
  }
  return closed;
}

// Runs `action` on libraft's disk I/O for `dir` (not started), as node 1,
// then lets the loop finish its work and closes the I/O.
void WithIo(const std::string& dir,
            const std::function<void(struct raft_io&)>& action) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  struct raft_uv_transport transport {};
  struct raft_io io {};
  ASSERT_EQ(raft_uv_tcp_init(&transport, &loop), 0);
  ASSERT_EQ(raft_uv_init(&io, &loop, dir.c_str(), &transport), 0);
  ASSERT_EQ(io.init(&io, 1, "127.0.0.1:7001"), 0) << io.errmsg;
  action(io);
  uv_run(&loop, UV_RUN_DEFAULT);
  io.close(&io, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  raft_uv_close(&io);
  raft_uv_tcp_close(&transport);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

void FreeLoaded(struct raft_snapshot* snapshot, struct raft_entry* entries,
                size_t n) {
  std::set<void*> batches;
  for (size_t i = 0; i < n; ++i) batches.insert(entries[i].batch);
  for (void* batch : batches) raft_free(batch);
  raft_free(entries);
  if (snapshot != nullptr) {
    for (unsigned i = 0; i < snapshot->n_bufs; ++i) {
      raft_free(snapshot->bufs[i].base);
    }
    raft_free(snapshot->bufs);
    raft_configuration_close(&snapshot->configuration);
    raft_free(snapshot);
  }
}

// libraft's own truncation of the log in `dir` from `index` on: the files
// it writes and removes are the real ones.
void TruncateWithLibraft(const std::string& dir, uint64_t index) {
  WithIo(dir, [index](struct raft_io& io) {
    raft_term term = 0;
    raft_id vote = 0;
    struct raft_snapshot* snapshot = nullptr;
    raft_index start = 0;
    struct raft_entry* entries = nullptr;
    size_t n = 0;
    ASSERT_EQ(io.load(&io, &term, &vote, &snapshot, &start, &entries, &n), 0)
        << io.errmsg;
    FreeLoaded(snapshot, entries, n);
    ASSERT_EQ(io.truncate(&io, index), 0) << io.errmsg;
  });
}

// What a power cut leaves when libraft truncates the log in `dir` from
// `index` on (inside a closed segment): libraft's truncated segment next to
// every segment it was unlinking. Returns the names of those.
std::set<std::string> CutDuringTruncationIn(const std::string& dir,
                                            uint64_t index) {
  std::map<std::string, std::string> unlinked;
  for (const Closed& segment : ClosedSegments(dir)) {
    if (segment.end >= index) {
      unlinked[segment.name] = ReadFile(fs::path(dir) / segment.name);
    }
  }
  TruncateWithLibraft(dir, index);
  std::set<std::string> names;
  for (const auto& [name, bytes] : unlinked) {
    EXPECT_FALSE(fs::exists(fs::path(dir) / name)) << name;
    WriteFile(fs::path(dir) / name, bytes);
    names.insert(name);
  }
  return names;
}

std::string Address() {
  return absl::StrCat("127.0.0.1:", testing::FreePort("127.0.0.1"));
}

// A log of 1 + 3 * 10 entries in four closed segments (a restart finalizes
// the open one): 1-1, 2-11, 12-21, 22-31.
class TruncationCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("raft-repair");
    ASSERT_TRUE(dir.ok());
    root_ = *dir;
    node_.dir = root_ + "/raft";
    node_.address = Address();
    for (int run = 0; run < 3; ++run) {
      ASSERT_NO_FATAL_FAILURE(RunAndPropose(node_, run, 10, &applied_));
    }
    // Finalizes the last open segment, as a start would.
    ASSERT_TRUE(ReadRaftLog(node_.dir, 1, node_.address).ok());
  }
  void TearDown() override { fs::remove_all(root_); }

  std::set<std::string> CutDuringTruncation(uint64_t index) {
    return CutDuringTruncationIn(node_.dir, index);
  }

  std::string root_;
  Node node_;
  std::map<uint64_t, std::string> applied_;  // by the three runs
};

TEST_F(TruncationCutTest, TheRunsMadeTheExpectedSegments) {
  std::vector<std::string> names;
  for (const Closed& segment : ClosedSegments(node_.dir)) {
    names.push_back(segment.name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"0000000000000001-0000000000000001",
                                      "0000000000000002-0000000000000011",
                                      "0000000000000012-0000000000000021",
                                      "0000000000000022-0000000000000031"}));
  ASSERT_EQ(applied_.size(), 30u);
  EXPECT_EQ(applied_.begin()->first, 2u);
  EXPECT_EQ(applied_.at(7), "r0n00005");
}

// The cut leaves 2-6 next to 2-11, 12-21 and 22-31: libraft refuses the
// log; the repair finishes the truncation and the node starts with entries
// 1 to 6, the next one going to index 7.
TEST_F(TruncationCutTest, RepairFinishesTheTruncation) {
  const std::set<std::string> unlinked = CutDuringTruncation(7);
  ASSERT_EQ(unlinked,
            (std::set<std::string>{"0000000000000002-0000000000000011",
                                   "0000000000000012-0000000000000021",
                                   "0000000000000022-0000000000000031"}));
  ASSERT_TRUE(fs::exists(node_.dir + "/0000000000000002-0000000000000006"));

  // The bug: libraft cannot load the log.
  absl::StatusOr<RaftLogSummary> broken =
      ReadRaftLog(node_.dir, 1, node_.address);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("first index should have been"),
            std::string::npos)
      << broken.status();

  // The repair itself, on a copy: exactly the unlinked files go, later
  // ones first.
  const std::string copy = root_ + "/copy";
  fs::copy(node_.dir, copy);
  absl::StatusOr<std::vector<std::string>> removed =
      RepairInterruptedTruncation(copy);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed,
            (std::vector<std::string>{"0000000000000022-0000000000000031",
                                      "0000000000000012-0000000000000021",
                                      "0000000000000002-0000000000000011"}));
  absl::StatusOr<RaftLogSummary> repaired = ReadRaftLog(copy, 1, node_.address);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->last_index, 6u);
  // Once repaired, nothing more to do.
  removed = RepairInterruptedTruncation(copy);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());

  // Start (which repairs) replays entries 2-6 as written, and appends the
  // next entry at 7.
  Recorder machine;
  absl::StatusOr<std::unique_ptr<Consensus>> consensus = node_.Start(&machine);
  ASSERT_TRUE(consensus.ok()) << consensus.status();
  ASSERT_TRUE(WaitForLeader(**consensus));
  ASSERT_TRUE(ProposeAndWait(**consensus, "after---").ok());
  (*consensus)->Stop();
  std::map<uint64_t, std::string> expected;
  for (uint64_t index = 2; index <= 6; ++index) {
    expected[index] = applied_.at(index);
  }
  expected[7] = "after---";
  EXPECT_EQ(machine.applied(), expected);
}

// A cut after some of the unlinks (here all but the longer segment's) is
// finished the same way.
TEST_F(TruncationCutTest, RepairFinishesAPartlyDoneTruncation) {
  CutDuringTruncation(15);
  fs::remove(node_.dir + "/0000000000000022-0000000000000031");
  ASSERT_TRUE(fs::exists(node_.dir + "/0000000000000012-0000000000000014"));
  ASSERT_FALSE(ReadRaftLog(node_.dir, 1, node_.address).ok());
  absl::StatusOr<std::vector<std::string>> removed =
      RepairInterruptedTruncation(node_.dir);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed,
            (std::vector<std::string>{"0000000000000012-0000000000000021"}));
  absl::StatusOr<RaftLogSummary> repaired =
      ReadRaftLog(node_.dir, 1, node_.address);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->last_index, 14u);
}

// An open segment holding entries is not what a truncation leaves (libraft
// finalizes open segments before it truncates): nothing is removed.
TEST_F(TruncationCutTest, LeavesTheDirAloneWhenAnOpenSegmentHoldsData) {
  CutDuringTruncation(7);
  WriteFile(node_.dir + "/open-9", std::string(4096, '\0') + "x");
  const std::map<std::string, std::string> before = Contents(node_.dir);
  absl::StatusOr<std::vector<std::string>> removed =
      RepairInterruptedTruncation(node_.dir);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  EXPECT_EQ(Contents(node_.dir), before);
}

// With a snapshot at S (the latest one, covering the log's start): the same
// repair; the node restores S, replays S+1 to k-1 and appends at k.
TEST(RaftDirRepairTest, FinishesATruncationAfterASnapshot) {
  absl::StatusOr<std::string> root = testing::MakeTempDir("raft-repair");
  ASSERT_TRUE(root.ok());
  Node node;
  node.dir = *root + "/raft";
  node.address = Address();
  node.snapshot_threshold = 8;
  node.snapshot_trailing = 2;
  std::map<uint64_t, std::string> applied;
  for (int run = 0; run < 3; ++run) {
    ASSERT_NO_FATAL_FAILURE(RunAndPropose(node, run, 12, &applied));
  }
  ASSERT_TRUE(ReadRaftLog(node.dir, 1, node.address).ok());
  unsigned long long snapshot = 0;
  for (const auto& [name, bytes] : Contents(node.dir)) {
    unsigned long long term = 0, index = 0, timestamp = 0;
    if (std::sscanf(name.c_str(), "snapshot-%llu-%llu-%llu.meta", &term, &index,
                    &timestamp) == 3) {
      snapshot = std::max(snapshot, index);
    }
  }
  ASSERT_GT(snapshot, 1u);
  // Truncate inside the last closed segment, past the snapshot (a node
  // truncates only entries past its commit index).
  const Closed last = ClosedSegments(node.dir).back();
  const uint64_t k = std::max(last.first, snapshot) + 1;
  ASSERT_LE(k, last.end) << last.name << " snapshot " << snapshot;
  EXPECT_EQ(CutDuringTruncationIn(node.dir, k),
            std::set<std::string>{last.name});
  const std::string truncated =
      absl::StrFormat("%016llu-%016llu", last.first, k - 1);
  ASSERT_TRUE(fs::exists(node.dir + "/" + truncated));

  Recorder machine;
  absl::StatusOr<std::unique_ptr<Consensus>> consensus = node.Start(&machine);
  ASSERT_TRUE(consensus.ok()) << consensus.status();
  ASSERT_TRUE(WaitForLeader(**consensus));
  ASSERT_TRUE(ProposeAndWait(**consensus, "after---").ok());
  (*consensus)->Stop();
  EXPECT_FALSE(fs::exists(node.dir + "/" + last.name));
  std::map<uint64_t, std::string> expected;
  for (uint64_t index = snapshot + 1; index < k; ++index) {
    expected[index] = applied.at(index);
  }
  expected[k] = "after---";
  EXPECT_EQ(machine.applied(), expected);
  fs::remove_all(*root);
}

// Healthy dirs, with and without snapshots (and so with the oldest
// segments gone), are left byte for byte as they were.
TEST(RaftDirRepairTest, LeavesHealthyDirsUntouched) {
  absl::StatusOr<std::string> root = testing::MakeTempDir("raft-repair");
  ASSERT_TRUE(root.ok());
  for (const bool snapshots : {false, true}) {
    SCOPED_TRACE(snapshots ? "with snapshots" : "without snapshots");
    Node node;
    node.dir = *root + (snapshots ? "/snapshots" : "/plain");
    node.address = Address();
    if (snapshots) {
      node.snapshot_threshold = 8;
      node.snapshot_trailing = 2;
    }
    std::map<uint64_t, std::string> applied;
    for (int run = 0; run < 3; ++run) {
      ASSERT_NO_FATAL_FAILURE(RunAndPropose(node, run, 12, &applied));
    }
    ASSERT_TRUE(ReadRaftLog(node.dir, 1, node.address).ok());
    const std::map<std::string, std::string> before = Contents(node.dir);
    bool has_snapshot = false;
    for (const auto& [name, bytes] : before) {
      has_snapshot |= name.rfind("snapshot-", 0) == 0;
    }
    ASSERT_EQ(has_snapshot, snapshots);
    if (snapshots) {
      ASSERT_NE(ClosedSegments(node.dir).front().first, 1u)
          << "the oldest segments should be gone";
    }
    ASSERT_TRUE(RepairRaftDir(node.dir, /*founder=*/true).ok());
    EXPECT_EQ(Contents(node.dir), before);
  }
  fs::remove_all(*root);
}

class BootstrapCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("raft-repair");
    ASSERT_TRUE(dir.ok());
    root_ = *dir;
    node_.dir = root_ + "/raft";
    node_.address = Address();
    fs::create_directory(node_.dir);
    // What uvBootstrap writes before its first segment: term 1.
    WithIo(node_.dir, [](struct raft_io& io) {
      EXPECT_EQ(io.set_term(&io, 1), 0) << io.errmsg;
    });
  }
  void TearDown() override { fs::remove_all(root_); }

  void ExpectUntouched(bool founder) {
    const std::map<std::string, std::string> before = Contents(node_.dir);
    ASSERT_TRUE(RepairRaftDir(node_.dir, founder).ok());
    EXPECT_EQ(Contents(node_.dir), before);
  }

  std::string root_;
  Node node_;
};

// The cut leaves metadata1 (term 1, no vote) and no log: libraft refuses
// to bootstrap; once repaired, the founder bootstraps and serves.
TEST_F(BootstrapCutTest, RepairLetsTheFounderBootstrap) {
  ASSERT_EQ(Contents(node_.dir).size(), 1u);
  ASSERT_EQ(Contents(node_.dir).count("metadata1"), 1u);
  WithIo(node_.dir, [this](struct raft_io& io) {
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    ASSERT_EQ(
        raft_configuration_add(&conf, 1, node_.address.c_str(), RAFT_VOTER), 0);
    EXPECT_EQ(io.bootstrap(&io, &conf), RAFT_CANTBOOTSTRAP);
    raft_configuration_close(&conf);
  });

  const std::string copy = root_ + "/copy";
  fs::copy(node_.dir, copy);
  absl::StatusOr<std::vector<std::string>> removed =
      RepairInterruptedBootstrap(copy);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, std::vector<std::string>{"metadata1"});
  EXPECT_TRUE(fs::is_empty(copy));

  // Start (which repairs) bootstraps: the group elects and commits.
  Recorder machine;
  absl::StatusOr<std::unique_ptr<Consensus>> consensus = node_.Start(&machine);
  ASSERT_TRUE(consensus.ok()) << consensus.status();
  ASSERT_TRUE(WaitForLeader(**consensus));
  ASSERT_TRUE(ProposeAndWait(**consensus, "first---").ok());
  EXPECT_EQ(machine.applied(),
            (std::map<uint64_t, std::string>{{2, "first---"}}));
  (*consensus)->Stop();
}

TEST_F(BootstrapCutTest, LeavesANonFounderAlone) { ExpectUntouched(false); }

TEST_F(BootstrapCutTest, LeavesAVoteAlone) {
  WithIo(node_.dir,
         [](struct raft_io& io) { EXPECT_EQ(io.set_vote(&io, 2), 0); });
  ExpectUntouched(true);
}

TEST_F(BootstrapCutTest, LeavesALaterTermAlone) {
  WithIo(node_.dir,
         [](struct raft_io& io) { EXPECT_EQ(io.set_term(&io, 2), 0); });
  ExpectUntouched(true);
}

TEST_F(BootstrapCutTest, LeavesALogAlone) {
  WriteFile(node_.dir + "/open-1", std::string(4096, '\0') + "x");
  ExpectUntouched(true);
  fs::remove(node_.dir + "/open-1");
  WriteFile(node_.dir + "/snapshot-1-5-100.meta", "meta");
  ExpectUntouched(true);
}

TEST_F(BootstrapCutTest, LeavesABootstrappedNodeAlone) {
  fs::remove_all(node_.dir);
  fs::create_directory(node_.dir);
  WithIo(node_.dir, [this](struct raft_io& io) {
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    ASSERT_EQ(
        raft_configuration_add(&conf, 1, node_.address.c_str(), RAFT_VOTER), 0);
    EXPECT_EQ(io.bootstrap(&io, &conf), 0) << io.errmsg;
    raft_configuration_close(&conf);
  });
  ExpectUntouched(true);
}

}  // namespace
}  // namespace raft_dir_repair_test
}  // namespace dedup
