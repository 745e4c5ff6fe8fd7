// dedupctl's cluster commands (dedup.v1.Cluster): the status table of a
// replicated group, and membership changes and leadership transfer sent to
// its leader. Thread-compatible; writes only to the given streams.
#ifndef DEDUP_CLIENT_DEDUPCTL_CLUSTER_H_
#define DEDUP_CLIENT_DEDUPCTL_CLUSTER_H_

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

// What one node said when asked for its status.
struct NodeReport {
  std::string address;  // As queried.
  absl::StatusOr<v1::ClusterStatusResponse> status;
};

// The status table: a header, then one row per node, by node id: ID ADDRESS
// ROLE TERM COMMIT APPLIED MATCH LAG LEADER LOG_TERM LOG_INDEX (the term and
// index of the last entry in the node's log: the most up-to-date log has the
// highest LOG_TERM, then the highest LOG_INDEX). A node that did not answer is
// "unreachable", with the id of the member whose client address it is, else
// "?" (such rows last).
// MATCH and LAG come from the leader's report (the answering leader with the
// highest term), "-" without one; LEADER is the leader id each node knows
// ("-" for none). Columns are padded to their widest cell.
void PrintClusterStatus(std::ostream& out,
                        const std::vector<NodeReport>& reports);

// The reports as one JSON document (dedupctl_output.h):
// {"nodes":[{"address":..,"nodeId":..,"status":{ClusterStatusResponse}} or
// {"address":..,"nodeId":..,"error":{"code":..,"message":..}}]}, by node id
// as in the table ("nodeId" left out when not known), each node once.
[[nodiscard]] nlohmann::json ClusterStatusJson(
    const std::vector<NodeReport>& reports);

// Runs a kCluster* invocation: status asks every address the router was
// given plus every member (by client address) the first node to answer
// lists, one attempt each; recover does the same, then names the node to
// recover from (dedupctl_recover.h); add, remove and transfer go to the leader
// through RetryingCall (following "dedup-leader"; an unknown outcome is
// reported, not retried). Prints in inv.output's format; returns the exit
// code documented in dedupctl_cli.h.
[[nodiscard]] int RunClusterCommand(LeaderRouter& router,
                                    const ClientOptions& options,
                                    const Invocation& inv, std::ostream& out,
                                    std::ostream& err);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_CLUSTER_H_
