// RaftLoop (one libuv loop shared by several groups' libraft instances): its
// queue and ticks, then real 3-node groups (StartRaft, loopback) sharing one
// loop per node: they elect, commit, lose a node and elect again, and a group
// stopped on a loop leaves the others on it running.
#include "replication/raft_consensus_shared_loop.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "replication/raft_consensus.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::shared_ptr<RaftLoop> StartLoop(unsigned tick_ms = 10) {
  absl::StatusOr<std::shared_ptr<RaftLoop>> loop = RaftLoop::Start(tick_ms);
  EXPECT_TRUE(loop.ok()) << loop.status();
  return loop.ok() ? *loop : nullptr;
}

TEST(RaftLoopTest, PostedWorkRunsOnTheLoopThreadInOrder) {
  std::shared_ptr<RaftLoop> loop = StartLoop();
  absl::Mutex mu;
  std::vector<int> order;
  bool all_on_loop = true;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(loop->Post([&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      all_on_loop = all_on_loop && loop->OnLoopThread();
    }));
  }
  ASSERT_TRUE(loop->RunAndWait([] {}));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(all_on_loop);
  EXPECT_FALSE(loop->OnLoopThread());
}

// Records the ticks it gets.
class Recorder : public RaftLoop::Ticked {
 public:
  void OnTick(uint64_t tick) override {
    absl::MutexLock lock(&mu_);
    ticks_.push_back(tick);
  }
  std::vector<uint64_t> ticks() const {
    absl::MutexLock lock(&mu_);
    return ticks_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<uint64_t> ticks_ ABSL_GUARDED_BY(mu_);
};

TEST(RaftLoopTest, MembersAreTickedTogetherUntilRemoved) {
  std::shared_ptr<RaftLoop> loop = StartLoop(5);
  Recorder a, b;
  loop->RunAndWait([&] {
    loop->Add(&a);
    loop->Add(&b);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  loop->RunAndWait([&] { loop->Remove(&a); });
  const size_t a_ticks = a.ticks().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  loop->RunAndWait([&] { loop->Remove(&b); });
  // Every round ticks every member with the same count (what lines up the
  // groups' heartbeats), and a removed member is not ticked again.
  const std::vector<uint64_t> at = a.ticks(), bt = b.ticks();
  ASSERT_GE(at.size(), 10u);
  EXPECT_EQ(at.size(), a_ticks);
  ASSERT_GT(bt.size(), at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    EXPECT_EQ(at[i], bt[i]) << i;
    if (i > 0) {
      EXPECT_EQ(at[i], at[i - 1] + 1) << i;
    }
  }
}

TEST(RaftLoopTest, CountFollowsGroupsAndTheCap) {
  EXPECT_EQ(RaftLoopCount(1), 1u);
  EXPECT_EQ(RaftLoopCount(0), 1u);
  EXPECT_LE(RaftLoopCount(64), 4u);
  EXPECT_LE(RaftLoopCount(64, 2), 2u);
  EXPECT_EQ(RaftLoopCount(64, 1), 1u);
}

// Applies nothing of note; counts what it applied.
class Machine : public StateMachine {
 public:
  absl::Status Apply(uint64_t, absl::string_view) override {
    absl::MutexLock lock(&mu_);
    ++applied_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Snapshot() override { return std::string("s"); }
  bool PrepareSnapshot(absl::string_view) override { return true; }
  absl::Status Restore(absl::string_view) override { return absl::OkStatus(); }
  void Tick(const ConsensusStatus&) override {}
  int applied() const {
    absl::MutexLock lock(&mu_);
    return applied_;
  }

 private:
  mutable absl::Mutex mu_;
  int applied_ ABSL_GUARDED_BY(mu_) = 0;
};

constexpr int kNodes = 3;
constexpr int kGroups = 3;

// kGroups groups of kNodes members; member n of every group runs on node
// n's one loop (each group member has its own Raft address and plane).
class SharedLoopGroups : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("raft-shared-loop-", getpid(), "-",
                        Clock::now().time_since_epoch().count());
    for (int n = 0; n < kNodes; ++n) loops_.push_back(StartLoop());
    for (int g = 0; g < kGroups; ++g) {
      for (int n = 0; n < kNodes; ++n) {
        addresses_[g][n] =
            absl::StrCat("127.0.0.1:", testing::FreePort("127.0.0.1"));
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      for (int n = 0; n < kNodes; ++n) {
        RaftOptions options;
        options.id = n + 1;
        options.raft_address = addresses_[g][n];
        options.dir = (dir_ / absl::StrCat("g", g, "n", n)).string();
        for (int m = 0; m < kNodes; ++m) {
          options.bootstrap.push_back(Member{static_cast<uint64_t>(m + 1),
                                             addresses_[g][m],
                                             MemberRole::kVoter, 0});
        }
        options.election_timeout_ms = 300;
        options.heartbeat_timeout_ms = 60;
        options.loop = loops_[n];
        absl::StatusOr<std::unique_ptr<Consensus>> started =
            StartRaft(options, &machines_[g][n]);
        ASSERT_TRUE(started.ok()) << started.status();
        consensus_[g][n] = *std::move(started);
      }
    }
  }

  void TearDown() override {
    for (auto& group : consensus_) {
      for (auto& member : group) member.reset();
    }
    loops_.clear();
    fs::remove_all(dir_);
  }

  // The node (index) leading group g, as every running member sees it, or
  // -1 when they do not agree (yet) on one that runs.
  int Leader(int g) const {
    int leader = -1;
    for (int n = 0; n < kNodes; ++n) {
      if (consensus_[g][n] == nullptr) continue;
      const ConsensusStatus status = consensus_[g][n]->Status();
      const int seen = static_cast<int>(status.leader_id) - 1;
      if (seen < 0 || consensus_[g][seen] == nullptr) return -1;
      if (leader != -1 && seen != leader) return -1;
      leader = seen;
    }
    return leader;
  }

  int WaitForLeader(int g, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (int leader = Leader(g); leader >= 0) return leader;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  absl::Status Propose(int g, int n) {
    Consensus& consensus = *consensus_[g][n];
    auto promise = std::make_shared<std::promise<absl::Status>>();
    std::future<absl::Status> done = promise->get_future();
    consensus.Post([&consensus, promise] {
      absl::Status s = consensus.Propose(
          "entry-08", [promise](absl::Status s) { promise->set_value(s); });
      if (!s.ok()) promise->set_value(s);
    });
    if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      return absl::DeadlineExceededError("not applied");
    }
    return done.get();
  }

  fs::path dir_;
  std::vector<std::shared_ptr<RaftLoop>> loops_;
  std::string addresses_[kGroups][kNodes];
  Machine machines_[kGroups][kNodes];
  std::unique_ptr<Consensus> consensus_[kGroups][kNodes];
};

TEST_F(SharedLoopGroups, EveryGroupElectsCommitsAndFailsOver) {
  for (int g = 0; g < kGroups; ++g) {
    const int leader = WaitForLeader(g, absl::Seconds(10));
    ASSERT_GE(leader, 0) << "group " << g;
    ASSERT_TRUE(Propose(g, leader).ok()) << "group " << g;
  }
  // Node 0 goes away (every group's member on its loop): the groups it led
  // elect another leader within a few election timeouts.
  const absl::Time lost = absl::Now();
  for (int g = 0; g < kGroups; ++g) consensus_[g][0].reset();
  for (int g = 0; g < kGroups; ++g) {
    const int leader = WaitForLeader(g, absl::Seconds(5));
    ASSERT_GE(leader, 1) << "group " << g;
    ASSERT_TRUE(Propose(g, leader).ok()) << "group " << g;
  }
  EXPECT_LT(absl::Now() - lost, absl::Seconds(5));
}

TEST_F(SharedLoopGroups, AGroupStoppedOnALoopLeavesTheOthersRunning) {
  for (int g = 0; g < kGroups; ++g)
    ASSERT_GE(WaitForLeader(g, absl::Seconds(10)), 0);
  for (int n = 0; n < kNodes; ++n) consensus_[0][n]->Stop();
  EXPECT_EQ(consensus_[0][1]->Status().role, Role::kUnavailable);
  for (int g = 1; g < kGroups; ++g) {
    const int leader = WaitForLeader(g, absl::Seconds(5));
    ASSERT_GE(leader, 0) << "group " << g;
    const int before = machines_[g][leader].applied();
    ASSERT_TRUE(Propose(g, leader).ok()) << "group " << g;
    EXPECT_GT(machines_[g][leader].applied(), before);
    // The loops still tick the groups: their status keeps advancing.
    const uint64_t ticks = consensus_[g][leader]->Status().ticks;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_GT(consensus_[g][leader]->Status().ticks, ticks);
  }
}

TEST_F(SharedLoopGroups, AFailedStartLeavesTheLoopUsable) {
  for (int g = 0; g < kGroups; ++g) {
    const int leader = WaitForLeader(g, absl::Seconds(10));
    ASSERT_GE(leader, 0) << "group " << g;
    ASSERT_TRUE(Propose(g, leader).ok()) << "group " << g;
  }
  // Two starts that fail on `loop`: the plane cannot bind (its address is
  // taken: nothing was opened on the loop), then a dir libraft refuses (a
  // directory where its metadata file goes: raft_init fails after the
  // transport opened its handle on the loop).
  Machine machine;
  auto fail_twice_on = [&](const std::shared_ptr<RaftLoop>& loop,
                           const std::string& name) {
    RaftOptions options;
    options.id = 1;
    options.raft_address = addresses_[0][0];
    options.dir = (dir_ / name / "taken").string();
    options.bootstrap = {
        Member{1, options.raft_address, MemberRole::kVoter, 0}};
    options.loop = loop;
    EXPECT_FALSE(StartRaft(options, &machine).ok());
    options.raft_address =
        absl::StrCat("127.0.0.1:", testing::FreePort("127.0.0.1"));
    options.dir = (dir_ / name / "refused").string();
    fs::create_directories(fs::path(options.dir) / "metadata1");
    EXPECT_FALSE(StartRaft(options, &machine).ok());
  };
  // On a loop of their own, which no connection of another group changes:
  // they left no handle there (one would outlive its group).
  std::shared_ptr<RaftLoop> own = StartLoop();
  ASSERT_NE(own, nullptr);
  size_t handles_before = 0;
  own->RunAndWait([&] { handles_before = own->handles(); });
  fail_twice_on(own, "own");
  size_t handles_after = 0;
  own->RunAndWait([&] { handles_after = own->handles(); });
  EXPECT_EQ(handles_after, handles_before);
  // On a loop that serves other groups: they go on.
  fail_twice_on(loops_[0], "shared");
  for (int g = 0; g < kGroups; ++g) {
    const int leader = WaitForLeader(g, absl::Seconds(10));
    ASSERT_GE(leader, 0) << "group " << g;
    ASSERT_TRUE(Propose(g, leader).ok()) << "group " << g;
  }
}

}  // namespace
}  // namespace dedup
