// Disaster recovery (--recover_as_sole_voter, server/recovery.h) on real
// processes: a group that lost two of three nodes for good is restarted from
// its survivor and refilled with fresh members; a survivor that is behind a
// reachable member refuses; the flag left set does not re-force a group
// that is alive again.
#include <uv.h>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

using Written = std::map<std::string, std::pair<uint64_t, std::string>>;

constexpr char kRecover[] = "--recover_as_sole_voter";

// Persists `term` in the Raft log of a stopped node (as a message carrying
// that term would have made it).
void SetPersistedTerm(const std::string& raft_dir, uint64_t id, uint64_t term) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  struct raft_uv_transport transport {};
  struct raft_io io {};
  ASSERT_EQ(raft_uv_tcp_init(&transport, &loop), 0);
  ASSERT_EQ(raft_uv_init(&io, &loop, raft_dir.c_str(), &transport), 0);
  ASSERT_EQ(io.init(&io, id, "127.0.0.1:1"), 0) << io.errmsg;
  EXPECT_EQ(io.set_term(&io, term), 0) << io.errmsg;
  io.close(&io, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  raft_uv_close(&io);
  raft_uv_tcp_close(&transport);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

class RecoveryTest : public ClusterTest {
 protected:
  // Waits until every running node has stored and applied the same last
  // index (what Cluster.Status reports).
  void WaitForEqualLogs() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<uint64_t> seen;
      for (int id = 1; id <= cluster_.size(); ++id) {
        if (!cluster_.running(id)) continue;
        absl::StatusOr<v1::ClusterStatusResponse> s = cluster_.Status(id);
        ASSERT_TRUE(s.ok()) << s.status();
        seen.push_back(s->last_index());
        seen.push_back(s->applied_index());
      }
      if (std::all_of(seen.begin(), seen.end(),
                      [&](uint64_t i) { return i == seen.front(); })) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "nodes did not reach one applied index";
  }

  // Kills `id` and deletes its data: the node is lost for good.
  void Destroy(int id) {
    cluster_.Kill(id);
    std::error_code ec;
    std::filesystem::remove_all(cluster_.data_dir(id), ec);
    ASSERT_FALSE(ec) << ec.message();
  }

  // Starts a fresh node (new id, empty dir) and adds it through `via`.
  int AddFreshNode(int via) {
    const int id = cluster_.AddJoiner();
    EXPECT_TRUE(cluster_.Start(id).ok());
    v1::AddNodeRequest add;
    add.set_node_id(id);
    add.set_raft_address(cluster_.raft_address(id));
    add.set_client_address(cluster_.client_address(id));
    v1::AddNodeResponse added;
    grpc::Status s = CallService<v1::Cluster>(
        cluster_.client_address(via), &v1::Cluster::Stub::AddNode, add, &added);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return id;
  }

  std::vector<uint64_t> Voters(int via) {
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(via);
    EXPECT_TRUE(status.ok()) << status.status();
    std::vector<uint64_t> voters;
    if (!status.ok()) return voters;
    for (const auto& m : status->members()) {
      if (m.role() == "voter") voters.push_back(m.id());
    }
    std::sort(voters.begin(), voters.end());
    return voters;
  }

  // The voters `via` reports, once they are `want` (the status is
  // refreshed every few ms: a change just made may not show yet).
  std::vector<uint64_t> VotersOnceEqual(int via,
                                        const std::vector<uint64_t>& want) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::vector<uint64_t> voters = Voters(via);
    while (voters != want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      voters = Voters(via);
    }
    return voters;
  }

  // Waits until node `id` reports no leader (its group lost its majority).
  void WaitForNoLeader(int id) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<v1::ClusterStatusResponse> s = cluster_.Status(id);
      if (s.ok() && s->leader_id() == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "node " << id << " still knows a leader";
  }
};

TEST_F(RecoveryTest, SurvivorOfALostMajorityServesEveryAcknowledgedWrite) {
  Written written = BeginAndComplete(leader_, 3000, "batch-");
  const Written one_by_one = WriteOneByOne(leader_, 50, "single-");
  written.insert(one_by_one.begin(), one_by_one.end());
  ASSERT_EQ(written.size(), 3050u);
  WaitForEqualLogs();

  // Any up-to-date node will do: take a follower, lose the other two.
  const int survivor = leader_ == 1 ? 2 : 1;
  for (int id = 1; id <= 3; ++id) {
    if (id != survivor) Destroy(id);
  }
  ASSERT_TRUE(cluster_.Stop(survivor).ok());
  // Without the flag it can never lead again (one voter of three).
  // With it, it leads alone (Start waits for a leader).
  absl::Status started = cluster_.Start(survivor, {kRecover});
  ASSERT_TRUE(started.ok()) << started;
  const std::string log = cluster_.process(survivor)->captured_stderr();
  EXPECT_NE(log.find("RECOVERY: forcing the configuration"), std::string::npos)
      << log;
  absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(survivor);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->role(), "leader");
  {
    const std::vector<uint64_t> want{uint64_t(survivor)};
    EXPECT_EQ(VotersOnceEqual(survivor, want), want);
  }

  const int fresh_a = AddFreshNode(survivor);
  const int fresh_b = AddFreshNode(survivor);
  {
    const std::vector<uint64_t> want{uint64_t(survivor), uint64_t(fresh_a),
                                     uint64_t(fresh_b)};
    EXPECT_EQ(VotersOnceEqual(survivor, want), want);
  }
  ExpectDuplicates(survivor, written);
  ExpectIdenticalReplicas();

  // The flag left set: the new group elects a leader without the survivor,
  // so its restart is refused rather than forcing a configuration again,
  // even without the marker of its first recovery.
  const std::string marker =
      cluster_.data_dir(survivor) + "/recovered_as_sole_voter";
  std::string marked;
  {
    std::ifstream in(marker);
    ASSERT_TRUE(std::getline(in, marked)) << marker;
  }
  std::filesystem::remove(marker);
  ASSERT_TRUE(cluster_.Stop(survivor).ok());
  absl::Status again = cluster_.Start(survivor, {kRecover});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("exited with code 7"), std::string::npos)
      << again;
  EXPECT_NE(again.message().find("the group is not lost"), std::string::npos)
      << again;
  // Nor when the whole new group is down (its members merely stopped, not
  // lost): the marker says members were added after the forced
  // configuration.
  std::ofstream(marker) << marked << "\n";
  ASSERT_TRUE(cluster_.Stop(fresh_a).ok());
  ASSERT_TRUE(cluster_.Stop(fresh_b).ok());
  absl::Status alone = cluster_.Start(survivor, {kRecover});
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.message().find("exited with code 7"), std::string::npos)
      << alone;
  EXPECT_NE(alone.message().find("already recovered the group"),
            std::string::npos)
      << alone;
  ASSERT_TRUE(cluster_.Start(fresh_a).ok());
  ASSERT_TRUE(cluster_.Start(fresh_b).ok());
  ASSERT_TRUE(cluster_.Start(survivor).ok());
  {
    const std::vector<uint64_t> want{uint64_t(survivor), uint64_t(fresh_a),
                                     uint64_t(fresh_b)};
    EXPECT_EQ(VotersOnceEqual(survivor, want), want);
  }
  ExpectDuplicates(fresh_a, written);
  ExpectIdenticalReplicas();
}

TEST_F(RecoveryTest, SurvivorBehindAReachableMemberRefuses) {
  const int behind = leader_ == 1 ? 2 : 1;
  const int ahead = 6 - leader_ - behind;
  const Written early = WriteOneByOne(leader_, 10, "early-");
  WaitForEqualLogs();
  ASSERT_TRUE(cluster_.Stop(behind).ok());
  const Written late = WriteOneByOne(leader_, 20, "late-");
  ASSERT_EQ(late.size(), 20u);
  cluster_.Kill(leader_);
  WaitForNoLeader(ahead);

  absl::Status refused = cluster_.Start(behind, {kRecover});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("exited with code 7"), std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find(absl::StrCat("member ", ahead, "'s log")),
            std::string::npos)
      << refused;

  // Told to, it recovers anyway (and loses what only `ahead` holds).
  absl::Status forced =
      cluster_.Start(behind, {kRecover, "--recover_even_if_behind"});
  ASSERT_TRUE(forced.ok()) << forced;
  {
    const std::vector<uint64_t> want{uint64_t(behind)};
    EXPECT_EQ(VotersOnceEqual(behind, want), want);
  }
  ExpectDuplicates(behind, early);
}

// A survivor whose persisted term was pushed to 2^64-1 (the bogus-message
// state in which no node ever elects again) recovers too.
TEST_F(RecoveryTest, SurvivorWithAPoisonedTermRecovers) {
  const Written written = WriteOneByOne(leader_, 30, "poisoned-");
  WaitForEqualLogs();
  const int survivor = leader_;
  for (int id = 1; id <= 3; ++id) {
    if (id != survivor) Destroy(id);
  }
  ASSERT_TRUE(cluster_.Stop(survivor).ok());
  SetPersistedTerm(cluster_.data_dir(survivor) + "/raft", survivor,
                   ~uint64_t{0});
  absl::Status started = cluster_.Start(survivor, {kRecover});
  ASSERT_TRUE(started.ok()) << started;
  absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(survivor);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->role(), "leader")
      << cluster_.process(survivor)->captured_stderr();
  EXPECT_LT(status->term(), uint64_t{1} << 32);
  const int fresh_a = AddFreshNode(survivor);
  const int fresh_b = AddFreshNode(survivor);
  {
    const std::vector<uint64_t> want{uint64_t(survivor), uint64_t(fresh_a),
                                     uint64_t(fresh_b)};
    EXPECT_EQ(VotersOnceEqual(survivor, want), want);
  }
  ExpectDuplicates(fresh_b, written);
  ExpectIdenticalReplicas();
}

}  // namespace
}  // namespace dedup
