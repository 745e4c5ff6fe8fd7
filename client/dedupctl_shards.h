// dedupctl's views of a sharded cluster (dedup.v1.Cluster.ShardMap):
// `cluster shards`, the groups with their slot ranges, replicas and leaders,
// and `cluster nodes`, per node the groups it hosts and leads and, for each
// group it leads, its members' lag (Cluster.Status of that group, asked of
// the node). Thread-compatible; writes only to the given streams.
#ifndef DEDUP_CLIENT_DEDUPCTL_SHARDS_H_
#define DEDUP_CLIENT_DEDUPCTL_SHARDS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/dedup_client.h"
#include "client/dedupctl_cli.h"
#include "client/leader_router.h"
#include "dedup/v1/cluster.pb.h"
#include "nlohmann/json.hpp"

namespace dedup::ctl {

// `cluster shards` or `cluster nodes` (args start at "cluster"): the
// invocation, or INVALID_ARGUMENT for extra arguments; std::nullopt for
// any other subcommand.
[[nodiscard]] std::optional<absl::StatusOr<Invocation>> ParseShardsSubcommand(
    const std::vector<std::string>& args);

// The shards table: "epoch: E" then a header and one row per group:
// GROUP SLOTS ([first,end)) REPLICAS (node ids) LEADER (id, "-" when none)
// LEADER_ADDRESS ("-" when none). Columns padded to their widest cell.
void PrintShards(std::ostream& out, const v1::ShardMapResponse& map);

// A group a node leads, with its status (the members and their lag) or
// why it could not be had.
struct LedGroup {
  uint32_t group_id = 0;
  absl::StatusOr<v1::ClusterStatusResponse> status;
};

// One node of the map.
struct NodeView {
  uint64_t node_id = 0;
  std::string address;
  std::vector<uint32_t> hosted;  // groups it is a replica of
  std::vector<LedGroup> led;     // groups it leads
};

// Every replica of `map`, by node id, without the statuses.
[[nodiscard]] std::vector<NodeView> NodesOf(const v1::ShardMapResponse& map);

// The nodes table: NODE ADDRESS HOSTED LEADS LAG, one row per node; LAG is,
// per led group, "gG(nID=LAG,...)" for its members other than the leader
// ("gG(unreachable)" when its status could not be had), "-" when it leads
// none.
void PrintNodes(std::ostream& out, const std::vector<NodeView>& nodes);

// {"epoch":"E","nodes":[{"nodeId":..,"clientAddress":..,"hostedGroups":[..],
// "ledGroups":[{"groupId":G,"members":[ClusterMember..]} or
// {"groupId":G,"error":{..}}]}]}, names as the proto's JSON mapping.
[[nodiscard]] nlohmann::json NodesJson(const v1::ShardMapResponse& map,
                                       const std::vector<NodeView>& nodes);

// Runs kClusterShards or kClusterNodes: the map from the first address that
// answers (one attempt each); nodes then asks each leader for its groups'
// status. Exit codes as dedupctl_cli.h says (2 when no node gave the map,
// or a leader did not answer).
[[nodiscard]] int RunShardsCommand(LeaderRouter& router,
                                   const ClientOptions& options,
                                   const Invocation& inv, std::ostream& out,
                                   std::ostream& err);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_SHARDS_H_
