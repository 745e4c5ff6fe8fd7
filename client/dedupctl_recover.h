// `dedupctl cluster recover`: after the status table, which node a group
// that lost its majority should be recovered from (dedupd
// --recover_as_sole_voter), and the steps, as text or JSON. Writes only to
// `out`.
#ifndef DEDUP_CLIENT_DEDUPCTL_RECOVER_H_
#define DEDUP_CLIENT_DEDUPCTL_RECOVER_H_

#include <ostream>
#include <vector>

#include "client/dedupctl_cluster.h"
#include "nlohmann/json.hpp"

namespace dedup::ctl {

// What the nodes' answers say about recovering the group. Points into the
// reports it was made from.
struct RecoveryAdvice {
  // kExitRejected when a node knows a leader (the group is not lost),
  // kExitOk when `recover_from` is set, kExitRpcError when no node answered.
  int exit_code = 0;
  const v1::ClusterStatusResponse* knows_leader = nullptr;
  // The reachable node with the most up-to-date log (highest last log term,
  // then last index; the lowest id among equals).
  const NodeReport* recover_from = nullptr;
};

[[nodiscard]] RecoveryAdvice AdviseRecovery(
    const std::vector<NodeReport>& reports);

// Prints the advice for `reports` (the group is not lost, or the node to
// recover from and the steps) and returns its exit code.
[[nodiscard]] int PrintRecoveryAdvice(std::ostream& out,
                                      const std::vector<NodeReport>& reports);

// The advice as JSON (64-bit integers as strings, as in the proto mapping):
// {"groupLost":false,"leaderId":"2","reportedBy":"1"} or
// {"groupLost":true,"recoverFrom":{"nodeId":..,"address":..,
// "lastLogTerm":..,"lastIndex":..}} ("recoverFrom": null when no node
// answered).
[[nodiscard]] nlohmann::json RecoveryAdviceJson(const RecoveryAdvice& advice);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_RECOVER_H_
