// Moving a group's replica between running nodes (Cluster.MoveReplica):
// 4 nodes, 2 groups of 3 replicas. One group's replica moves from a node
// hosting it to the node that does not while clients write to that group
// through every node, retrying: no call fails, every acknowledged write
// reads back through every node, the old node no longer hosts the group
// (directories gone, shard map and status say so), the new node hosts it
// across a restart, the replicas stay identical, and what the new node
// copied is that group's state only. The shard map (stored in group 0, the
// group that moves) is the same on every node before and within seconds
// after the move, at a higher epoch, and across a restart of every node.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/storage_key.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace move_test {
namespace {

using Keys = std::map<std::string, std::pair<uint64_t, std::string>>;
using Clock = std::chrono::steady_clock;

// One Cluster call to one node (no redirect).
template <typename Request, typename Response, typename Method>
grpc::Status ClusterCall(
    const std::string& address, Method method, const Request& request,
    Response* response,
    std::chrono::seconds timeout = std::chrono::seconds(10)) {
  auto stub = v1::Cluster::NewStub(testing::TestChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  return ((*stub).*method)(&context, request, response);
}

// A retrying client's call: through `address`, following the leader hint,
// again on UNAVAILABLE, ABORTED (outcome unknown: a Begin with the same
// owner and a Complete with the same fence are safe to repeat) and
// deadlines, for up to a minute.
template <typename Request, typename Response, typename Method>
grpc::Status Retrying(const std::string& address, Method method,
                      const Request& request, Response* response) {
  std::string target = address;
  grpc::Status status;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    auto stub = v1::Dedup::NewStub(testing::TestChannel(target));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    response->Clear();
    status = ((*stub).*method)(&context, request, response);
    const grpc::StatusCode code = status.error_code();
    if (code != grpc::StatusCode::UNAVAILABLE &&
        code != grpc::StatusCode::ABORTED &&
        code != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return status;
    }
    const std::string hint = LeaderHint(context);
    target = hint.empty() ? address : hint;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(hint.empty() ? 100 : 5));
  }
  return status;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

std::string GroupDirOf(const std::string& data_dir, uint32_t group) {
  return group == 0 ? data_dir : absl::StrCat(data_dir, "/groups/", group);
}

class MoveTest : public ::testing::Test {
 protected:
  MoveTest()
      : cluster_(4, {"--groups=2", "--replication_factor=3",
                     "--snapshot_threshold=64", "--snapshot_trailing=16"}) {}

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    ASSERT_TRUE(WaitForLeaders(std::chrono::seconds(30)));
  }

  v1::ShardMapResponse ShardMap(int id) {
    v1::ShardMapResponse map;
    grpc::Status s =
        ClusterCall(cluster_.client_address(id), &v1::Cluster::Stub::ShardMap,
                    v1::ShardMapRequest(), &map);
    EXPECT_TRUE(s.ok()) << id << ": " << s.error_message();
    return map;
  }

  grpc::Status GroupStatus(int id, uint32_t group,
                           v1::ClusterStatusResponse* status) {
    v1::ClusterStatusRequest request;
    request.set_group_id(group);
    return ClusterCall(cluster_.client_address(id), &v1::Cluster::Stub::Status,
                       request, status);
  }

  std::vector<int> ReplicasOf(const v1::ShardMapResponse& map, uint32_t group) {
    std::vector<int> ids;
    for (const v1::ShardGroup& g : map.groups()) {
      if (g.group_id() != group) continue;
      for (const v1::ShardReplica& r : g.replicas()) {
        ids.push_back(static_cast<int>(r.node_id()));
      }
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // The shard map once every node serves the same one (epoch, ranges and
  // replicas; leader hints are each node's own) at `min_epoch` or above,
  // within `timeout`; a failure naming what differed otherwise.
  v1::ShardMapResponse SameMapEverywhere(uint64_t min_epoch,
                                         std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::string differs;
    while (true) {
      std::vector<v1::ShardMapResponse> maps;
      differs.clear();
      for (int id = 1; id <= 4; ++id) {
        v1::ShardMapResponse map;
        grpc::Status s = ClusterCall(cluster_.client_address(id),
                                     &v1::Cluster::Stub::ShardMap,
                                     v1::ShardMapRequest(), &map);
        if (!s.ok()) {
          differs = absl::StrCat("node ", id, ": ", s.error_message());
          break;
        }
        for (v1::ShardGroup& g : *map.mutable_groups()) {
          g.clear_leader_node_id();
          g.clear_leader_address();
        }
        if (map.epoch() < min_epoch) {
          differs = absl::StrCat("node ", id, " serves epoch ", map.epoch());
        } else if (!maps.empty() && map.SerializeAsString() !=
                                        maps.front().SerializeAsString()) {
          differs =
              absl::StrCat("node ", id, " serves ", map.ShortDebugString(),
                           ", node 1 ", maps.front().ShortDebugString());
        }
        maps.push_back(std::move(map));
      }
      if (differs.empty()) return maps.front();
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the nodes serve different shard maps: " << differs;
    return v1::ShardMapResponse();
  }

  bool WaitForLeaders(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      map_ = ShardMap(1);
      int led = 0;
      for (const v1::ShardGroup& g : map_.groups()) {
        for (const v1::ShardReplica& r : g.replicas()) {
          v1::ClusterStatusResponse status;
          if (GroupStatus(static_cast<int>(r.node_id()), g.group_id(), &status)
                  .ok() &&
              status.role() == "leader") {
            ++led;
          }
        }
      }
      if (led == map_.groups_size()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  uint32_t GroupOfKey(const std::string& key) const {
    const uint32_t slot = SlotOf("cluster", key);
    for (const v1::ShardGroup& g : map_.groups()) {
      if (slot >= g.first_slot() && slot < g.end_slot()) return g.group_id();
    }
    return 0;
  }

  // The next key of `group` from `*i` on, named with `prefix`.
  std::string NextKeyOf(uint32_t group, const std::string& prefix, int* i) {
    while (true) {
      std::string key = absl::StrCat(prefix, (*i)++);
      if (GroupOfKey(key) == group) return key;
    }
  }

  // Begins and Completes `key` through `via` as a retrying client; false
  // (and counted) when a call failed after its retries.
  bool Write(int via, const std::string& key, const std::string& result,
             Keys* acknowledged, std::mutex* mu) {
    v1::BeginResponse begun;
    grpc::Status s =
        Retrying(cluster_.client_address(via), &v1::Dedup::Stub::Begin,
                 BeginOf(key, "w-" + key), &begun);
    if (!s.ok() || begun.status() != v1::BeginResponse::STARTED) {
      ADD_FAILURE() << key << " via " << via << ": begin " << s.error_message()
                    << " " << begun.ShortDebugString();
      return false;
    }
    v1::CompleteResponse completed;
    s = Retrying(cluster_.client_address(via), &v1::Dedup::Stub::Complete,
                 CompleteOf(key, begun.fence(), result), &completed);
    if (!s.ok() || completed.status() != v1::CompleteResponse::OK) {
      ADD_FAILURE() << key << " via " << via << ": complete "
                    << s.error_message() << " " << completed.ShortDebugString();
      return false;
    }
    std::lock_guard<std::mutex> lock(*mu);
    (*acknowledged)[key] = {begun.fence(), result};
    return true;
  }

  // Every key answers DUPLICATE with its fence and result through `via`.
  void ExpectDuplicates(int via, const Keys& keys) {
    v1::BeginBatchRequest request;
    std::vector<const Keys::value_type*> order;
    auto flush = [&] {
      v1::BeginBatchResponse response;
      grpc::Status s =
          Retrying(cluster_.client_address(via), &v1::Dedup::Stub::BeginBatch,
                   request, &response);
      ASSERT_TRUE(s.ok()) << "via " << via << ": " << s.error_message();
      ASSERT_EQ(response.items_size(), request.items_size());
      for (int i = 0; i < response.items_size(); ++i) {
        const std::string& key = order[i]->first;
        ASSERT_TRUE(response.items(i).has_response())
            << key << " via " << via << ": "
            << response.items(i).error().message();
        const v1::BeginResponse& r = response.items(i).response();
        EXPECT_EQ(r.status(), v1::BeginResponse::DUPLICATE)
            << key << " via " << via;
        EXPECT_EQ(r.fence(), order[i]->second.first) << key << " via " << via;
        EXPECT_EQ(r.result(), order[i]->second.second) << key << " via " << via;
      }
      request.clear_items();
      order.clear();
    };
    for (const auto& entry : keys) {
      *request.add_items() = BeginOf(entry.first, "someone-else");
      order.push_back(&entry);
      if (request.items_size() == 200) flush();
    }
    if (request.items_size() > 0) flush();
  }

  // Waits until `replicas` of `group` applied the same index; their
  // digests.
  std::map<int, v1::DigestResponse> ConvergedDigests(
      uint32_t group, const std::vector<int>& replicas) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    std::map<int, v1::DigestResponse> digests;
    while (Clock::now() < deadline) {
      digests.clear();
      std::set<uint64_t> applied;
      for (int id : replicas) {
        v1::DigestRequest request;
        request.set_group_id(group);
        v1::DigestResponse d;
        if (ClusterCall(cluster_.client_address(id), &v1::Cluster::Stub::Digest,
                        request, &d)
                .ok()) {
          digests[id] = d;
          applied.insert(d.applied_index());
        }
      }
      if (digests.size() == replicas.size() && applied.size() == 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return digests;
  }

  ClusterHarness cluster_;
  v1::ShardMapResponse map_;
};

TEST_F(MoveTest, AGroupMovesWhileClientsWriteToIt) {
  // The group that moves (G), the other (H), the node leaving G (one that
  // hosts both, G's leader if it does) and the node joining it.
  const uint32_t g = 0;
  const uint32_t h = 1;
  const std::vector<int> g_before = ReplicasOf(map_, g);
  const std::vector<int> h_replicas = ReplicasOf(map_, h);
  ASSERT_EQ(g_before.size(), 3u);
  int to = 0;
  for (int id = 1; id <= 4; ++id) {
    if (std::find(g_before.begin(), g_before.end(), id) == g_before.end()) {
      to = id;
    }
  }
  int from = 0;
  for (int id : g_before) {
    if (std::find(h_replicas.begin(), h_replicas.end(), id) ==
        h_replicas.end()) {
      continue;
    }
    v1::ClusterStatusResponse status;
    if (from == 0 ||
        (GroupStatus(id, g, &status).ok() && status.role() == "leader")) {
      from = id;
    }
  }
  ASSERT_NE(to, 0);
  ASSERT_NE(from, 0);
  // Every node serves the founding map.
  const v1::ShardMapResponse map_before =
      SameMapEverywhere(1, std::chrono::seconds(5));
  EXPECT_EQ(map_before.epoch(), 1u);

  // H holds far more than G: what `to` copies shows whose state it is.
  Keys acknowledged;
  std::mutex mu;
  int next_h = 0, next_g = 0;
  {
    std::vector<std::thread> loaders;
    std::atomic<int> loaded{0};
    std::vector<std::string> h_keys;
    for (int i = 0; i < 600; ++i) h_keys.push_back(NextKeyOf(h, "h", &next_h));
    Keys h_written;
    for (int t = 0; t < 8; ++t) {
      loaders.emplace_back([&, t] {
        for (size_t i = t; i < h_keys.size(); i += 8) {
          loaded += Write(h_replicas[i % 3], h_keys[i],
                          std::string(8 << 10, 'h'), &h_written, &mu);
        }
      });
    }
    for (std::thread& t : loaders) t.join();
    ASSERT_EQ(loaded.load(), 600);
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(Write(1 + i % 4, NextKeyOf(g, "g", &next_g),
                      absl::StrCat("before-", i), &acknowledged, &mu));
  }

  // Writers to G through every node, across the whole move.
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> writers;
  std::mutex key_mu;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int n = 0; !stop.load(); ++n) {
        std::string key;
        {
          std::lock_guard<std::mutex> lock(key_mu);
          key = NextKeyOf(g, absl::StrCat("w", t, "-"), &next_g);
        }
        if (!Write(1 + (n + t) % 4, key, absl::StrCat("during-", key),
                   &acknowledged, &mu)) {
          ++failed;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  v1::MoveReplicaRequest move;
  move.set_group_id(g);
  move.set_from_node_id(from);
  move.set_to_node_id(to);
  v1::MoveReplicaResponse moved;
  grpc::Status s =
      ClusterCall(cluster_.client_address(to), &v1::Cluster::Stub::MoveReplica,
                  move, &moved, std::chrono::seconds(120));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  stop = true;
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(s.ok()) << s.error_message();
  for (const std::string& step : moved.steps()) {
    std::cerr << "move step: " << step << "\n";
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(acknowledged.size(), 150u);

  // The new replica set, everywhere; the old node hosts G no more.
  std::vector<int> g_after;
  for (int id : g_before) {
    if (id != from) g_after.push_back(id);
  }
  g_after.push_back(to);
  std::sort(g_after.begin(), g_after.end());
  std::vector<uint64_t> moved_replicas(moved.replicas().begin(),
                                       moved.replicas().end());
  std::sort(moved_replicas.begin(), moved_replicas.end());
  EXPECT_EQ(moved_replicas,
            std::vector<uint64_t>(g_after.begin(), g_after.end()));
  // The meta group's map, the same on every node within seconds, `from`
  // (no longer hosting group 0, the meta group) included.
  const v1::ShardMapResponse map_after =
      SameMapEverywhere(map_before.epoch() + 1, std::chrono::seconds(5));
  EXPECT_GT(map_after.epoch(), map_before.epoch());
  EXPECT_EQ(ReplicasOf(map_after, g), g_after);
  EXPECT_EQ(ReplicasOf(map_after, h), h_replicas);
  v1::ClusterStatusResponse status;
  EXPECT_EQ(GroupStatus(from, g, &status).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(GroupStatus(from, h, &status).ok());
  EXPECT_EQ(std::vector<uint32_t>(status.hosted_groups().begin(),
                                  status.hosted_groups().end()),
            std::vector<uint32_t>{h});
  const std::string from_dir = cluster_.data_dir(from);
  if (g == 0) {
    EXPECT_FALSE(std::filesystem::exists(from_dir + "/raft"));
    EXPECT_FALSE(std::filesystem::exists(from_dir + "/state"));
  } else {
    EXPECT_FALSE(std::filesystem::exists(GroupDirOf(from_dir, g)));
  }

  // Only G's state was copied to `to`.
  ASSERT_TRUE(GroupStatus(to, g, &status).ok());
  const uint64_t fetched = status.checkpoint_bytes_fetched();
  const uint64_t h_bytes =
      DirBytes(GroupDirOf(cluster_.data_dir(h_replicas[0]), h) + "/state");
  std::cerr << "fetched for group " << g << ": " << fetched << " bytes; group "
            << h << "'s state: " << h_bytes << " bytes\n";
  EXPECT_GT(fetched, 0u);
  EXPECT_LT(fetched * 4, h_bytes);
  ASSERT_TRUE(GroupStatus(to, h, &status).ok());
  EXPECT_EQ(status.checkpoint_bytes_fetched(), 0u);

  // Every acknowledged write, through every node; identical replicas.
  for (int id = 1; id <= 4; ++id) ExpectDuplicates(id, acknowledged);
  std::map<int, v1::DigestResponse> digests = ConvergedDigests(g, g_after);
  ASSERT_EQ(digests.size(), 3u);
  for (const auto& [id, d] : digests) {
    EXPECT_EQ(d.digest(), digests.begin()->second.digest()) << "node " << id;
    EXPECT_EQ(d.live_records(), acknowledged.size()) << "node " << id;
  }

  // `to` hosts G across a restart; `from` still does not.
  for (int id : {to, from}) {
    absl::Status stopped = cluster_.Stop(id);
    ASSERT_TRUE(stopped.ok()) << "node " << id << ": " << stopped;
    absl::Status started = cluster_.Start(id);
    ASSERT_TRUE(started.ok()) << "node " << id << ": " << started;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline &&
         !(GroupStatus(to, g, &status).ok() && status.leader_id() != 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(GroupStatus(to, g, &status).ok());
  EXPECT_NE(status.leader_id(), 0u);
  EXPECT_EQ(GroupStatus(from, g, &status).error_code(),
            grpc::StatusCode::NOT_FOUND);
  digests = ConvergedDigests(g, g_after);
  ASSERT_EQ(digests.size(), 3u);
  for (const auto& [id, d] : digests) {
    EXPECT_EQ(d.digest(), digests.begin()->second.digest()) << "node " << id;
  }
  ExpectDuplicates(to, acknowledged);

  // The map survives restarting every node: the same epoch and replicas,
  // everywhere.
  for (int id = 1; id <= 4; ++id) {
    absl::Status stopped = cluster_.Stop(id);
    ASSERT_TRUE(stopped.ok()) << "node " << id << ": " << stopped;
  }
  for (int id = 1; id <= 4; ++id) {
    absl::Status started = cluster_.Start(id);
    ASSERT_TRUE(started.ok()) << "node " << id << ": " << started;
  }
  // Once every group has a leader again, and a little more: a leader that
  // wrote a map at its start would show by then.
  ASSERT_TRUE(WaitForLeaders(std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const v1::ShardMapResponse map_restarted =
      SameMapEverywhere(map_after.epoch(), std::chrono::seconds(10));
  EXPECT_EQ(map_restarted.SerializeAsString(), map_after.SerializeAsString())
      << map_restarted.ShortDebugString();
}

// A membership change made directly (Cluster.RemoveNode, what `dedupctl
// cluster remove --group` sends) reaches the map too, on every node.
TEST_F(MoveTest, ARemovedMemberLeavesTheMapOnEveryNode) {
  const uint32_t h = 1;
  std::vector<int> replicas = ReplicasOf(map_, h);
  ASSERT_EQ(replicas.size(), 3u);
  int leader = 0;
  for (int id : replicas) {
    v1::ClusterStatusResponse status;
    if (GroupStatus(id, h, &status).ok() && status.role() == "leader") {
      leader = id;
    }
  }
  ASSERT_NE(leader, 0);
  const int removed = replicas[0] == leader ? replicas[1] : replicas[0];
  const v1::ShardMapResponse before =
      SameMapEverywhere(1, std::chrono::seconds(5));

  v1::RemoveNodeRequest remove;
  remove.set_node_id(removed);
  remove.set_group_id(h);
  v1::RemoveNodeResponse response;
  grpc::Status s =
      ClusterCall(cluster_.client_address(leader),
                  &v1::Cluster::Stub::RemoveNode, remove, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();

  const v1::ShardMapResponse after =
      SameMapEverywhere(before.epoch() + 1, std::chrono::seconds(5));
  replicas.erase(std::find(replicas.begin(), replicas.end(), removed));
  EXPECT_EQ(ReplicasOf(after, h), replicas);
  EXPECT_EQ(ReplicasOf(after, 0), ReplicasOf(before, 0));
}

// A map that names the wrong replicas for a group (as a membership
// change whose own map write failed for good would leave it) is repaired by
// the group's leader within a few looks: every node serves the group's
// voters again.
TEST_F(MoveTest, AMapThatDisagreesWithTheVotersIsRepaired) {
  const uint32_t h = 1;
  const std::vector<int> replicas = ReplicasOf(map_, h);
  ASSERT_EQ(replicas.size(), 3u);
  int outsider = 0;
  for (int id = 1; id <= 4; ++id) {
    if (std::find(replicas.begin(), replicas.end(), id) == replicas.end()) {
      outsider = id;
    }
  }
  ASSERT_NE(outsider, 0);
  const v1::ShardMapResponse before =
      SameMapEverywhere(1, std::chrono::seconds(5));
  // Written straight into the map: the outsider instead of a replica.
  v1::SetGroupReplicasRequest wrong;
  wrong.set_group_id(h);
  wrong.add_replicas(replicas[0]);
  wrong.add_replicas(replicas[1]);
  wrong.add_replicas(outsider);
  v1::SetGroupReplicasResponse written;
  grpc::Status s;
  for (int id = 1; id <= 4; ++id) {  // group 0's leader takes it
    s = ClusterCall(cluster_.client_address(id),
                    &v1::Cluster::Stub::SetGroupReplicas, wrong, &written);
    if (s.ok()) break;
  }
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GT(written.epoch(), before.epoch());

  const v1::ShardMapResponse after =
      SameMapEverywhere(written.epoch() + 1, std::chrono::seconds(10));
  std::vector<int> listed = ReplicasOf(after, h);
  std::vector<int> want = replicas;
  std::sort(listed.begin(), listed.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listed, want);
  EXPECT_EQ(ReplicasOf(after, 0), ReplicasOf(before, 0));
}

}  // namespace
}  // namespace move_test
}  // namespace dedup
