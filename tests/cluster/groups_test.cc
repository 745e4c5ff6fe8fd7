// Nodes hosting several Raft groups (--groups): 6 nodes and 12 groups of 3
// replicas on loopback take keys through any node, each group's replicas
// stay identical, each node holds only its groups' slots, every node serves
// the same shard map, and leadership spreads over the nodes; 3 nodes with 3
// groups survive a SIGKILL and leadership returns to its preferred nodes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "replication/shard_layout.h"
#include "storage/storage_key.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/testing/http_get.h"

namespace dedup {
namespace {

using Keys = std::map<std::string, std::pair<uint64_t, std::string>>;

// One Cluster call to one node (no redirect), with a generous deadline.
template <typename Request, typename Response, typename Method>
grpc::Status ClusterCall(const std::string& address, Method method,
                         const Request& request, Response* response) {
  auto stub = v1::Cluster::NewStub(testing::TestChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  return ((*stub).*method)(&context, request, response);
}

v1::ShardMapResponse ShardMapOf(const std::string& address) {
  v1::ShardMapResponse map;
  grpc::Status s = ClusterCall(address, &v1::Cluster::Stub::ShardMap,
                               v1::ShardMapRequest(), &map);
  EXPECT_TRUE(s.ok()) << address << ": " << s.error_message();
  return map;
}

std::string StatusRole(const std::string& address, uint32_t group) {
  v1::ClusterStatusRequest request;
  request.set_group_id(group);
  v1::ClusterStatusResponse status;
  grpc::Status s =
      ClusterCall(address, &v1::Cluster::Stub::Status, request, &status);
  return s.ok() ? status.role() : "";
}

// Begins and Completes `key` through `address`, following the leader hint
// (a node hosting no replica of the key's group names a replica).
bool WriteKey(const std::string& address, const std::string& key,
              std::pair<uint64_t, std::string>* written) {
  v1::BeginResponse begun;
  grpc::Status s =
      Call(address, &v1::Dedup::Stub::Begin, BeginOf(key, "w"), &begun);
  if (!s.ok() || begun.status() != v1::BeginResponse::STARTED) {
    ADD_FAILURE() << key << " via " << address << ": begin "
                  << s.error_message() << " " << begun.ShortDebugString();
    return false;
  }
  const v1::CompleteRequest complete =
      CompleteOf(key, begun.fence(), absl::StrCat("result-", key));
  v1::CompleteResponse completed;
  s = Call(address, &v1::Dedup::Stub::Complete, complete, &completed);
  if (!s.ok() || completed.status() != v1::CompleteResponse::OK) {
    ADD_FAILURE() << key << " via " << address << ": complete "
                  << s.error_message() << " " << completed.ShortDebugString();
    return false;
  }
  *written = {begun.fence(), complete.result()};
  return true;
}

class GroupsTest : public ::testing::Test {
 protected:
  GroupsTest(int nodes, int groups, std::vector<std::string> flags = {})
      : cluster_(nodes, WithGroups(groups, std::move(flags))),
        groups_(groups) {}

  static std::vector<std::string> WithGroups(int groups,
                                             std::vector<std::string> flags) {
    flags.push_back(absl::StrCat("--groups=", groups));
    return flags;
  }

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    ASSERT_TRUE(WaitForLeaders(std::chrono::seconds(30)));
  }

  // The groups node `id` hosts, by the shard map.
  std::vector<uint32_t> HostedBy(int id) {
    std::vector<uint32_t> hosted;
    for (const v1::ShardGroup& g : map_.groups()) {
      for (const v1::ShardReplica& r : g.replicas()) {
        if (r.node_id() == static_cast<uint64_t>(id)) {
          hosted.push_back(g.group_id());
        }
      }
    }
    return hosted;
  }

  // Group id -> its leaders as the running replicas report them.
  std::map<uint32_t, std::set<int>> Leaders() {
    std::map<uint32_t, std::set<int>> leaders;
    for (int id = 1; id <= cluster_.size(); ++id) {
      if (!cluster_.running(id)) continue;
      for (uint32_t g : HostedBy(id)) {
        if (StatusRole(cluster_.client_address(id), g) == "leader") {
          leaders[g].insert(id);
        }
      }
    }
    return leaders;
  }

  // Until every group has one leader; reads the shard map first.
  bool WaitForLeaders(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int id = 1; id <= cluster_.size() && map_.groups().empty(); ++id) {
        if (cluster_.running(id))
          map_ = ShardMapOf(cluster_.client_address(id));
      }
      std::map<uint32_t, std::set<int>> leaders = Leaders();
      if (static_cast<int>(leaders.size()) == groups_ &&
          std::all_of(leaders.begin(), leaders.end(),
                      [](const auto& l) { return l.second.size() == 1; })) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // Node id -> how many groups it leads, once every group has one leader
  // and no node leads more than `most` (or at the timeout).
  std::map<int, int> SettledLeaderCounts(int most,
                                         std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::map<int, int> counts;
    while (std::chrono::steady_clock::now() < deadline) {
      counts.clear();
      std::map<uint32_t, std::set<int>> leaders = Leaders();
      for (const auto& [g, ids] : leaders) {
        for (int id : ids) ++counts[id];
      }
      bool settled = static_cast<int>(leaders.size()) == groups_;
      for (const auto& [id, n] : counts) settled = settled && n <= most;
      if (settled) return counts;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return counts;
  }

  // Waits until every group is led by its preferred leader (its first
  // replica in `layout`): until then the balancers move leaderships, and a
  // call meeting a transfer is refused UNAVAILABLE (callers retry; the
  // tests that make single calls must not meet one).
  bool PreferredLeadersSettled(const ShardLayout& layout,
                               std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::map<uint32_t, std::set<int>> leaders = Leaders();
      bool settled = static_cast<int>(leaders.size()) == groups_;
      for (const auto& [g, ids] : leaders) {
        const int preferred =
            static_cast<int>(layout.Find(g)->replicas.front());
        settled = settled && ids == std::set<int>{preferred};
      }
      if (settled) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // Writes keys prefix0..prefix(n-1) on `threads` threads, each key through
  // a running node picked by its index.
  Keys WriteKeys(int n, const std::string& prefix, int threads = 16) {
    std::vector<int> nodes;
    for (int id = 1; id <= cluster_.size(); ++id) {
      if (cluster_.running(id)) nodes.push_back(id);
    }
    Keys keys;
    std::mutex mu;
    std::atomic<int> failed{0};
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t) {
      writers.emplace_back([&, t] {
        for (int i = t; i < n; i += threads) {
          const std::string key = absl::StrCat(prefix, i);
          const int via = nodes[(i * 7 + t) % nodes.size()];
          std::pair<uint64_t, std::string> written;
          if (!WriteKey(cluster_.client_address(via), key, &written)) {
            ++failed;
            continue;
          }
          std::lock_guard<std::mutex> lock(mu);
          keys[key] = written;
        }
      });
    }
    for (std::thread& w : writers) w.join();
    EXPECT_EQ(failed.load(), 0);
    return keys;
  }

  // Every key in `keys` answers DUPLICATE with its fence and result through
  // node `via` (a Begin by another owner, following the leader hint). An
  // UNAVAILABLE (nothing happened: e.g. the key's group is in a leadership
  // hand-off, which a restart's balancer makes) is asked again, as clients
  // do, for up to 5 s.
  void ExpectDuplicatesVia(int via, const Keys& keys) {
    for (const auto& [key, want] : keys) {
      v1::BeginResponse r;
      grpc::Status s;
      for (int attempt = 0; attempt < 50; ++attempt) {
        s = Call(cluster_.client_address(via), &v1::Dedup::Stub::Begin,
                 BeginOf(key, "someone-else"), &r);
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ASSERT_TRUE(s.ok()) << key << " via " << via << ": " << s.error_message();
      EXPECT_EQ(r.status(), v1::BeginResponse::DUPLICATE) << key;
      EXPECT_EQ(r.fence(), want.first) << key;
      EXPECT_EQ(r.result(), want.second) << key;
    }
  }

  // Group `g`'s digests on its running replicas once they applied the same
  // index (empty at the timeout).
  std::map<int, v1::DigestResponse> ConvergedDigests(uint32_t g) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::map<int, v1::DigestResponse> digests;
      std::set<uint64_t> indexes;
      for (int id = 1; id <= cluster_.size(); ++id) {
        const std::vector<uint32_t> hosted = HostedBy(id);
        if (!cluster_.running(id) ||
            std::find(hosted.begin(), hosted.end(), g) == hosted.end()) {
          continue;
        }
        v1::DigestRequest request;
        request.set_group_id(g);
        grpc::Status s =
            ClusterCall(cluster_.client_address(id), &v1::Cluster::Stub::Digest,
                        request, &digests[id]);
        EXPECT_TRUE(s.ok()) << s.error_message();
        indexes.insert(digests[id].applied_index());
      }
      if (indexes.size() == 1) return digests;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return {};
  }

  // The group owning `key`'s slot, by the shard map.
  uint32_t GroupOfKey(const std::string& key) const {
    const uint32_t slot = SlotOf("cluster", key);
    for (const v1::ShardGroup& g : map_.groups()) {
      if (slot >= g.first_slot() && slot < g.end_slot()) return g.group_id();
    }
    ADD_FAILURE() << "no group owns slot " << slot;
    return 0;
  }

  ClusterHarness cluster_;
  const int groups_;
  v1::ShardMapResponse map_;
};

class SixNodesTwelveGroups : public GroupsTest {
 protected:
  SixNodesTwelveGroups() : GroupsTest(6, 12) {}
};

// Maps served by different nodes match in everything but transient leader
// hints.
void ExpectSameMap(const v1::ShardMapResponse& a,
                   const v1::ShardMapResponse& b) {
  EXPECT_EQ(a.epoch(), b.epoch());
  EXPECT_EQ(a.slot_count(), b.slot_count());
  ASSERT_EQ(a.groups_size(), b.groups_size());
  for (int i = 0; i < a.groups_size(); ++i) {
    v1::ShardGroup x = a.groups(i);
    v1::ShardGroup y = b.groups(i);
    EXPECT_EQ(x.leader_node_id(), y.leader_node_id()) << "group " << i;
    x.clear_leader_node_id();
    x.clear_leader_address();
    y.clear_leader_node_id();
    y.clear_leader_address();
    EXPECT_EQ(x.SerializeAsString(), y.SerializeAsString()) << "group " << i;
  }
}

TEST_F(SixNodesTwelveGroups, KeysSpreadOverGroupsAndEveryNodeAnswers) {
  // The map: 12 groups of 3 covering every slot in order, the same on
  // every node, each replica with the client address it serves on.
  ASSERT_EQ(map_.epoch(), 1u);
  ASSERT_EQ(map_.slot_count(), kSlotCount);
  ASSERT_EQ(map_.groups_size(), 12);
  uint32_t next = 0;
  for (const v1::ShardGroup& g : map_.groups()) {
    EXPECT_EQ(g.first_slot(), next);
    EXPECT_GT(g.end_slot(), g.first_slot());
    next = g.end_slot();
    ASSERT_EQ(g.replicas_size(), 3);
    for (const v1::ShardReplica& r : g.replicas()) {
      EXPECT_EQ(r.client_address(), cluster_.client_address(r.node_id()));
    }
  }
  EXPECT_EQ(next, kSlotCount);

  // Leadership spreads: at most ceil(12/6) = 2 groups per node.
  const std::map<int, int> led =
      SettledLeaderCounts(2, std::chrono::seconds(30));
  for (const auto& [id, n] : led) EXPECT_LE(n, 2) << "node " << id;
  // Settled, every node names the same leaders (hosted groups' live ones,
  // other groups' preferred ones).
  const v1::ShardMapResponse settled = ShardMapOf(cluster_.client_address(1));
  for (int id = 2; id <= 6; ++id) {
    ExpectSameMap(settled, ShardMapOf(cluster_.client_address(id)));
  }

  const auto start = std::chrono::steady_clock::now();
  const Keys keys = WriteKeys(20'000, "k");
  ASSERT_EQ(keys.size(), 20'000u);
  std::cerr << "20000 keys written in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " ms\n";
  // A sample through every node, whatever groups it hosts.
  for (int id = 1; id <= 6; ++id) {
    Keys sample;
    int i = 0;
    for (const auto& entry : keys) {
      if (i++ % 40 == id) sample.insert(entry);
    }
    ExpectDuplicatesVia(id, sample);
  }

  // Per group, identical replicas; per node, exactly its groups' keys.
  std::map<uint32_t, uint64_t> keys_per_group;
  for (const auto& [key, v] : keys) ++keys_per_group[GroupOfKey(key)];
  std::map<int, uint64_t> held;
  for (uint32_t g = 0; g < 12; ++g) {
    const std::map<int, v1::DigestResponse> digests = ConvergedDigests(g);
    ASSERT_EQ(digests.size(), 3u) << "group " << g;
    for (const auto& [id, d] : digests) {
      EXPECT_EQ(d.digest(), digests.begin()->second.digest()) << "group " << g;
      EXPECT_EQ(d.live_records(), keys_per_group[g]) << "group " << g;
      held[id] += d.live_records();
    }
  }
  for (int id = 1; id <= 6; ++id) {
    uint64_t want = 0;
    for (uint32_t g : HostedBy(id)) want += keys_per_group[g];
    EXPECT_EQ(held[id], want) << "node " << id;
    EXPECT_LT(want, keys.size()) << "node " << id << " holds every key";
  }
}

TEST_F(SixNodesTwelveGroups, ClusterCallsNameTheirGroup) {
  // The nodes place the groups as FoundingLayout does from --peers.
  absl::StatusOr<ShardLayout> layout =
      FoundingLayout({1, 2, 3, 4, 5, 6}, 12, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(PreferredLeadersSettled(*layout, std::chrono::seconds(30)));
  const std::vector<uint32_t> hosted = HostedBy(1);
  ASSERT_EQ(hosted, layout->HostedBy(1));
  uint32_t foreign = 0;  // a group node 1 does not host
  while (layout->groups[foreign].HasReplica(1)) ++foreign;
  const uint32_t own = hosted.back();
  v1::ClusterStatusRequest request;
  request.set_group_id(foreign);
  v1::ClusterStatusResponse status;
  grpc::Status s = ClusterCall(cluster_.client_address(1),
                               &v1::Cluster::Stub::Status, request, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find(
                absl::StrCat("hosts no replica of group ", foreign)),
            std::string::npos)
      << s.error_message();
  request.set_group_id(own);
  s = ClusterCall(cluster_.client_address(1), &v1::Cluster::Stub::Status,
                  request, &status);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(status.group_id(), own);
  EXPECT_EQ(std::vector<uint32_t>(status.hosted_groups().begin(),
                                  status.hosted_groups().end()),
            hosted);
  // The group's members are its replicas, not every node.
  std::set<uint64_t> members;
  for (const v1::ClusterMember& m : status.members()) members.insert(m.id());
  const std::vector<uint64_t>& replicas = layout->groups[own].replicas;
  EXPECT_EQ(members, std::set<uint64_t>(replicas.begin(), replicas.end()));
  // A Dedup call for a key of a group node 1 does not host is refused with
  // a hint naming a replica of that group.
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    const std::string k = absl::StrCat("probe", i);
    if (GroupOfKey(k) == foreign) key = k;
  }
  auto stub = cluster_.DedupStub(1);
  grpc::ClientContext context;
  // As if forwarded already: answered here, not forwarded again.
  context.AddMetadata("dedup-forwarded", "9");
  v1::BeginResponse begun;
  s = stub->Begin(&context, BeginOf(key, "o"), &begun);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find(
                absl::StrCat("node 1 hosts no replica of group ", foreign)),
            std::string::npos)
      << s.error_message();
  const std::string hint = LeaderHint(context);
  bool names_a_replica = false;
  for (uint64_t id : layout->groups[foreign].replicas) {
    names_a_replica |= hint == cluster_.client_address(static_cast<int>(id));
  }
  EXPECT_TRUE(names_a_replica) << hint;
  // A client's own call is forwarded to the group's leader (one hop), and
  // the answer tells a smart client the map's epoch.
  const std::string epoch =
      absl::StrCat(ShardMapOf(cluster_.client_address(1)).epoch());
  grpc::ClientContext direct;
  s = stub->Begin(&direct, BeginOf(key, "o"), &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(begun.status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(Trailer(direct, "dedup-shard-epoch"), epoch);
  // So does a batch whose items node 1 sent on to their groups' leaders.
  v1::BeginBatchRequest batch;
  for (int i = 0; batch.items_size() < 4; ++i) {
    const std::string k = absl::StrCat("batch", i);
    if (GroupOfKey(k) == foreign) *batch.add_items() = BeginOf(k, "o");
  }
  grpc::ClientContext batched;
  v1::BeginBatchResponse answers;
  s = stub->BeginBatch(&batched, batch, &answers);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(answers.items_size(), 4);
  for (const auto& item : answers.items()) {
    EXPECT_EQ(item.response().status(), v1::BeginResponse::STARTED);
  }
  EXPECT_EQ(Trailer(batched, "dedup-shard-epoch"), epoch);
}

class ThreeNodesThreeGroups : public GroupsTest {
 protected:
  ThreeNodesThreeGroups() : GroupsTest(3, 3) {}
};

TEST_F(ThreeNodesThreeGroups, EveryGroupSurvivesASigkill) {
  ASSERT_EQ(SettledLeaderCounts(1, std::chrono::seconds(20)).size(), 3u);
  const Keys before = WriteKeys(600, "a", 8);
  ASSERT_EQ(before.size(), 600u);
  cluster_.Kill(1);
  // Every group has a leader among nodes 2 and 3, and answers.
  ASSERT_TRUE(WaitForLeaders(std::chrono::seconds(20)));
  ExpectDuplicatesVia(2, before);
  const Keys after = WriteKeys(600, "b", 8);
  ASSERT_EQ(after.size(), 600u);
  std::set<uint32_t> groups_written;
  for (const auto& [key, v] : after) groups_written.insert(GroupOfKey(key));
  EXPECT_EQ(groups_written.size(), 3u);
  ExpectDuplicatesVia(3, after);
}

TEST_F(ThreeNodesThreeGroups, LeadershipReturnsToThePreferredLeader) {
  // Node 1 is group 0's preferred leader; without it, 2 or 3 lead group 0
  // as well as their own.
  ASSERT_EQ(SettledLeaderCounts(1, std::chrono::seconds(20)).size(), 3u);
  cluster_.Kill(1);
  ASSERT_TRUE(WaitForLeaders(std::chrono::seconds(20)));
  ASSERT_TRUE(cluster_.Start(1).ok());
  // Back: it leads one group again, and so does every node.
  const std::map<int, int> led =
      SettledLeaderCounts(1, std::chrono::seconds(30));
  EXPECT_EQ(led, (std::map<int, int>{{1, 1}, {2, 1}, {3, 1}}));
}

// Snapshots every 16 entries: a node that missed a few hundred writes
// installs each group's state from that group's replicas.
class ThreeNodesThreeGroupsSnapshots : public GroupsTest {
 protected:
  ThreeNodesThreeGroupsSnapshots()
      : GroupsTest(3, 3,
                   {"--snapshot_threshold=16", "--snapshot_trailing=16",
                    "--metrics_address=127.0.0.1:0"}) {}
};

TEST_F(ThreeNodesThreeGroupsSnapshots, EachGroupInstallsItsOwnState) {
  // Settled first: a hand-off to node 3 racing its stop would stall its
  // group for a while (see the report on the groups branch).
  ASSERT_EQ(SettledLeaderCounts(1, std::chrono::seconds(20)).size(), 3u);
  ASSERT_TRUE(cluster_.Stop(3).ok());
  const Keys keys = WriteKeys(600, "s", 8);
  ASSERT_EQ(keys.size(), 600u);
  ASSERT_TRUE(cluster_.Start(3).ok());
  std::map<uint32_t, uint64_t> keys_per_group;
  for (const auto& [key, v] : keys) ++keys_per_group[GroupOfKey(key)];
  for (uint32_t g = 0; g < 3; ++g) {
    const std::map<int, v1::DigestResponse> digests = ConvergedDigests(g);
    ASSERT_EQ(digests.size(), 3u) << "group " << g;
    for (const auto& [id, d] : digests) {
      EXPECT_EQ(d.digest(), digests.begin()->second.digest())
          << "group " << g << " node " << id;
      EXPECT_EQ(d.live_records(), keys_per_group[g])
          << "group " << g << " node " << id;
    }
  }
  EXPECT_NE(cluster_.process(3)->captured_stderr().find("installed a snapshot"),
            std::string::npos);
  ExpectDuplicatesVia(3, keys);
  // dedup_raft_* counters are sums over each node's groups: nodes 1 and 2
  // proposed every operation while 3 was down, across the three groups;
  // the state of one group (its term) is not exported.
  double proposed = 0;
  for (int id : {1, 2}) {
    const int port = cluster_.process(id)->metrics_port();
    absl::StatusOr<double> ops =
        testing::ScrapeSample(port, "dedup_raft_operations_proposed_total");
    ASSERT_TRUE(ops.ok()) << ops.status();
    proposed += *ops;
    EXPECT_TRUE(absl::IsNotFound(
        testing::ScrapeSample(port, "dedup_raft_term").status()));
  }
  // Begin and Complete for each of the 600 keys: 1,200 operations over the
  // three groups (one group's alone is about a third of that).
  EXPECT_GE(proposed, 1200);
}

}  // namespace
}  // namespace dedup
