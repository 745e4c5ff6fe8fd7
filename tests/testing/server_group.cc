// ServerProcess::StartGroup: the replicated group (or sharded cluster) a
// test runs against with DEDUP_TEST_CLUSTER set.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "tests/testing/process_output.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {

using Clock = std::chrono::steady_clock;

namespace {

// DEDUP_TEST_CLUSTER's shape: "NxG" (N nodes founding G groups), anything
// else a group of 3.
struct GroupShape {
  int nodes = 3;
  int groups = 1;
};

GroupShape ShapeFromEnvironment() {
  GroupShape shape;
  const char* value = std::getenv("DEDUP_TEST_CLUSTER");
  std::vector<std::string> parts =
      absl::StrSplit(value == nullptr ? "" : value, 'x');
  int nodes = 0, groups = 0;
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &nodes) &&
      absl::SimpleAtoi(parts[1], &groups) && nodes >= 1 && nodes <= 9 &&
      groups >= 1) {
    shape.nodes = nodes;
    shape.groups = groups;
  }
  return shape;
}

// True once every group is led by its preferred leader (its first
// replica), as seen by a node hosting it (ShardMap names live leaders only
// for those): until then the nodes' balancers move leaderships, and calls
// meeting a transfer are refused UNAVAILABLE, which these tests do not retry.
bool EveryGroupLed(const std::vector<std::string>& addresses,
                   uint64_t first_id) {
  std::map<uint32_t, bool> led;
  for (size_t i = 0; i < addresses.size(); ++i) {
    auto stub = v1::Cluster::NewStub(TestChannel(addresses[i]));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(1));
    v1::ShardMapResponse map;
    if (!stub->ShardMap(&context, v1::ShardMapRequest(), &map).ok()) {
      return false;
    }
    for (const v1::ShardGroup& group : map.groups()) {
      bool& seen = led[group.group_id()];
      for (const v1::ShardReplica& replica : group.replicas()) {
        if (replica.node_id() == first_id + i) {
          seen = seen || group.leader_node_id() == group.replicas(0).node_id();
        }
      }
    }
  }
  return std::all_of(led.begin(), led.end(),
                     [](const auto& entry) { return entry.second; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::StartGroup(
    const std::vector<std::string>& extra_flags, std::string data_dir) {
  const GroupShape shape = ShapeFromEnvironment();
  const int kNodes = shape.nodes;
  std::unique_ptr<ServerProcess> group(new ServerProcess());
  if (data_dir.empty()) {
    absl::StatusOr<std::string> dir = MakeTempDir("dedupd-group");
    if (!dir.ok()) return dir.status();
    data_dir = *std::move(dir);
    group->owns_data_dir_ = true;
  }
  group->data_dir_ = data_dir;
  std::vector<std::string> clients;
  std::vector<std::string> peers;
  for (int id = 1; id <= kNodes; ++id) {
    const std::string ip = absl::StrCat("127.0.0.", id);
    clients.push_back(absl::StrCat(ip, ":", FreePort(ip)));
    peers.push_back(
        absl::StrCat(id, "=", ip, ":", FreePort(ip), "=", clients.back()));
  }
  for (int id = 1; id <= kNodes; ++id) {
    std::vector<std::string> flags = extra_flags;
    flags.push_back(absl::StrCat("--node_id=", id));
    flags.push_back(absl::StrCat("--peers=", absl::StrJoin(peers, ",")));
    flags.push_back(absl::StrCat("--address=", clients[id - 1]));
    if (shape.groups > 1) {
      flags.push_back(absl::StrCat("--groups=", shape.groups));
    }
    absl::StatusOr<std::unique_ptr<ServerProcess>> member =
        Start(flags, absl::StrCat(data_dir, "/n", id));
    if (!member.ok()) return member.status();
    group->members_.push_back(*std::move(member));
  }
  // Leaders settle a few seconds after the first elections (the balancer
  // waits for a term to last 3 s).
  const auto deadline =
      Clock::now() + kServerStartTimeout * (shape.groups > 1 ? 2 : 1);
  while (Clock::now() < deadline) {
    if (shape.groups > 1) {
      // Any node answers (it forwards): the first one stands for the group.
      if (EveryGroupLed(clients, 1)) {
        group->address_ = group->members_[0]->address();
        group->port_ = group->members_[0]->port();
        group->ready_ = group->members_[0]->ready();
        return group;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    for (const auto& member : group->members_) {
      auto stub = v1::Cluster::NewStub(TestChannel(member->address()));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(1));
      v1::ClusterStatusResponse status;
      if (stub->Status(&context, v1::ClusterStatusRequest(), &status).ok() &&
          status.role() == "leader") {
        group->address_ = member->address();
        group->port_ = member->port();
        group->ready_ = member->ready();
        return group;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("the test group elected no leader within 20 s; output:\n",
                   OutputTail(group->captured_stderr())));
}

}  // namespace dedup::testing
