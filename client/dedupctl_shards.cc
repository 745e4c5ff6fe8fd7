#include "client/dedupctl_shards.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/batch_answers.h"
#include "client/dedupctl_format.h"
#include "client/dedupctl_output.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace dedup::ctl {
namespace {

std::string OrDash(uint64_t id) { return id == 0 ? "-" : absl::StrCat(id); }
std::string OrDash(const std::string& text) {
  return text.empty() ? "-" : text;
}

// One attempt at `address` with the deadline.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> AskNode(LeaderRouter& router,
                                 const std::string& address,
                                 absl::Duration deadline, Method method,
                                 const Request& request) {
  auto stub = v1::Cluster::NewStub(router.EndpointFor(address)->channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  Response response;
  const grpc::Status status = ((*stub).*method)(&context, request, &response);
  if (!status.ok()) return ToAbslStatus(status);
  return response;
}

// The map from the first address that gives it.
absl::StatusOr<v1::ShardMapResponse> FetchMap(LeaderRouter& router,
                                              absl::Duration deadline) {
  absl::Status last = absl::InvalidArgumentError("no server address given");
  for (const std::string& address : router.addresses()) {
    absl::StatusOr<v1::ShardMapResponse> map =
        AskNode<v1::ShardMapRequest, v1::ShardMapResponse>(
            router, address, deadline, &v1::Cluster::Stub::ShardMap,
            v1::ShardMapRequest());
    if (map.ok()) return map;
    last = absl::Status(map.status().code(),
                        absl::StrCat(address, ": ", map.status().message()));
  }
  return last;
}

std::string LagCell(const LedGroup& led, uint64_t self) {
  if (!led.status.ok()) return absl::StrCat("g", led.group_id, "(unreachable)");
  std::vector<std::string> members;
  for (const v1::ClusterMember& member : led.status->members()) {
    if (member.id() == self) continue;
    members.push_back(absl::StrCat("n", member.id(), "=", member.lag()));
  }
  return absl::StrCat("g", led.group_id, "(", absl::StrJoin(members, ","), ")");
}

}  // namespace

std::optional<absl::StatusOr<Invocation>> ParseShardsSubcommand(
    const std::vector<std::string>& args) {
  if (args.size() < 2 || (args[1] != "shards" && args[1] != "nodes")) {
    return std::nullopt;
  }
  if (args.size() > 2) {
    return absl::StatusOr<Invocation>(absl::InvalidArgumentError(absl::StrCat(
        "'cluster ", args[1], "' takes no arguments, got ", args.size() - 2)));
  }
  Invocation inv;
  inv.command =
      args[1] == "shards" ? Command::kClusterShards : Command::kClusterNodes;
  return absl::StatusOr<Invocation>(std::move(inv));
}

void PrintShards(std::ostream& out, const v1::ShardMapResponse& map) {
  out << "epoch: " << map.epoch() << "\n";
  std::vector<std::vector<std::string>> table = {
      {"GROUP", "SLOTS", "REPLICAS", "LEADER", "LEADER_ADDRESS"}};
  for (const v1::ShardGroup& group : map.groups()) {
    std::vector<std::string> replicas;
    for (const v1::ShardReplica& replica : group.replicas()) {
      replicas.push_back(absl::StrCat(replica.node_id()));
    }
    table.push_back(
        {absl::StrCat(group.group_id()),
         absl::StrCat("[", group.first_slot(), ",", group.end_slot(), ")"),
         replicas.empty() ? "-" : absl::StrJoin(replicas, ","),
         OrDash(group.leader_node_id()), OrDash(group.leader_address())});
  }
  PrintTable(out, table);
}

std::vector<NodeView> NodesOf(const v1::ShardMapResponse& map) {
  std::map<uint64_t, NodeView> nodes;
  for (const v1::ShardGroup& group : map.groups()) {
    for (const v1::ShardReplica& replica : group.replicas()) {
      NodeView& node = nodes[replica.node_id()];
      node.node_id = replica.node_id();
      if (node.address.empty()) node.address = replica.client_address();
      node.hosted.push_back(group.group_id());
      if (group.leader_node_id() == replica.node_id()) {
        node.led.push_back({group.group_id(), absl::UnknownError("not asked")});
      }
    }
  }
  std::vector<NodeView> out;
  for (auto& [id, node] : nodes) out.push_back(std::move(node));
  return out;
}

void PrintNodes(std::ostream& out, const std::vector<NodeView>& nodes) {
  std::vector<std::vector<std::string>> table = {
      {"NODE", "ADDRESS", "HOSTED", "LEADS", "LAG"}};
  for (const NodeView& node : nodes) {
    std::vector<std::string> led, lag;
    for (const LedGroup& group : node.led) {
      led.push_back(absl::StrCat(group.group_id));
      lag.push_back(LagCell(group, node.node_id));
    }
    table.push_back(
        {absl::StrCat(node.node_id), OrDash(node.address),
         node.hosted.empty() ? "-" : absl::StrJoin(node.hosted, ","),
         led.empty() ? "-" : absl::StrJoin(led, ","),
         lag.empty() ? "-" : absl::StrJoin(lag, " ")});
  }
  PrintTable(out, table);
}

nlohmann::json NodesJson(const v1::ShardMapResponse& map,
                         const std::vector<NodeView>& nodes) {
  nlohmann::json list = nlohmann::json::array();
  for (const NodeView& node : nodes) {
    nlohmann::json led = nlohmann::json::array();
    for (const LedGroup& group : node.led) {
      nlohmann::json entry = {{"groupId", group.group_id}};
      if (group.status.ok()) {
        nlohmann::json members = nlohmann::json::array();
        for (const v1::ClusterMember& member : group.status->members()) {
          members.push_back(ProtoToJson(member));
        }
        entry["members"] = std::move(members);
      } else {
        entry["error"] = StatusToJson(group.status.status());
      }
      led.push_back(std::move(entry));
    }
    list.push_back({{"nodeId", absl::StrCat(node.node_id)},
                    {"clientAddress", node.address},
                    {"hostedGroups", node.hosted},
                    {"ledGroups", std::move(led)}});
  }
  return {{"epoch", absl::StrCat(map.epoch())}, {"nodes", std::move(list)}};
}

int RunShardsCommand(LeaderRouter& router, const ClientOptions& options,
                     const Invocation& inv, std::ostream& out,
                     std::ostream& err) {
  absl::StatusOr<v1::ShardMapResponse> map = FetchMap(router, options.deadline);
  if (!map.ok())
    return PrintError(inv.output, err, map.status(), kExitRpcError);
  if (inv.command == Command::kClusterShards) {
    if (inv.output == OutputFormat::kJson) {
      PrintJson(out, *map);
    } else {
      PrintShards(out, *map);
    }
    return kExitOk;
  }
  std::vector<NodeView> nodes = NodesOf(*map);
  absl::Status first_error;
  for (NodeView& node : nodes) {
    for (LedGroup& group : node.led) {
      v1::ClusterStatusRequest request;
      request.set_group_id(group.group_id);
      group.status =
          AskNode<v1::ClusterStatusRequest, v1::ClusterStatusResponse>(
              router, node.address, options.deadline,
              &v1::Cluster::Stub::Status, request);
      if (!group.status.ok() && first_error.ok()) {
        first_error =
            absl::Status(group.status.status().code(),
                         absl::StrCat(node.address, " (group ", group.group_id,
                                      "): ", group.status.status().message()));
      }
    }
  }
  if (inv.output == OutputFormat::kJson) {
    PrintJson(out, NodesJson(*map, nodes));
  } else {
    PrintNodes(out, nodes);
  }
  if (!first_error.ok()) {
    return PrintError(inv.output, err, first_error, kExitRpcError);
  }
  return kExitOk;
}

}  // namespace dedup::ctl
