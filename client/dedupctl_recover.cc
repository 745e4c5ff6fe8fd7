#include "client/dedupctl_recover.h"

#include "client/dedupctl_cli.h"

namespace dedup::ctl {
namespace {

bool MoreUpToDate(const v1::ClusterStatusResponse& a,
                  const v1::ClusterStatusResponse& b) {
  if (a.last_log_term() != b.last_log_term()) {
    return a.last_log_term() > b.last_log_term();
  }
  if (a.last_index() != b.last_index()) return a.last_index() > b.last_index();
  return a.node_id() < b.node_id();
}

}  // namespace

RecoveryAdvice AdviseRecovery(const std::vector<NodeReport>& reports) {
  RecoveryAdvice advice;
  for (const NodeReport& report : reports) {
    if (!report.status.ok()) continue;
    const v1::ClusterStatusResponse& s = *report.status;
    if (s.leader_id() != 0) {
      advice.knows_leader = &s;
      advice.recover_from = nullptr;
      advice.exit_code = kExitRejected;
      return advice;
    }
    if (advice.recover_from == nullptr ||
        MoreUpToDate(s, *advice.recover_from->status)) {
      advice.recover_from = &report;
    }
  }
  advice.exit_code = advice.recover_from == nullptr ? kExitRpcError : kExitOk;
  return advice;
}

nlohmann::json RecoveryAdviceJson(const RecoveryAdvice& advice) {
  if (advice.knows_leader != nullptr) {
    return {{"groupLost", false},
            {"leaderId", std::to_string(advice.knows_leader->leader_id())},
            {"reportedBy", std::to_string(advice.knows_leader->node_id())}};
  }
  nlohmann::json from = nullptr;
  if (advice.recover_from != nullptr) {
    const v1::ClusterStatusResponse& s = *advice.recover_from->status;
    from = {{"nodeId", std::to_string(s.node_id())},
            {"address", advice.recover_from->address},
            {"lastLogTerm", std::to_string(s.last_log_term())},
            {"lastIndex", std::to_string(s.last_index())}};
  }
  return {{"groupLost", true}, {"recoverFrom", from}};
}

int PrintRecoveryAdvice(std::ostream& out,
                        const std::vector<NodeReport>& reports) {
  const RecoveryAdvice advice = AdviseRecovery(reports);
  if (advice.knows_leader != nullptr) {
    const v1::ClusterStatusResponse& s = *advice.knows_leader;
    out << "\nnode " << s.node_id() << " knows a leader (node " << s.leader_id()
        << "): the group is not lost, do not recover it. Replace lost "
           "members with `cluster remove` and `cluster add`.\n";
    return advice.exit_code;
  }
  const NodeReport* best = advice.recover_from;
  if (best == nullptr) {
    out << "\nno node answered: recover from the data of a surviving "
           "member (start it, then run this again).\n";
    return kExitRpcError;
  }
  const v1::ClusterStatusResponse& s = *best->status;
  out << "\nno reachable node knows a leader. Most up-to-date reachable node: "
      << s.node_id() << " at " << best->address << " (last log term "
      << s.last_log_term() << ", index " << s.last_index() << ").\n"
      << "If the unreachable members are lost for good (a majority of the "
         "voters), recover from node "
      << s.node_id()
      << " (entries only a lost member held that no reachable node has are "
         "lost; acknowledged writes are not, when every lost member is "
         "gone for good and node "
      << s.node_id() << " was in the majority that acknowledged them):\n"
      << "  1. keep the other reachable members running (node " << s.node_id()
      << " compares its log with theirs and refuses if one is ahead)\n"
      << "  2. restart node " << s.node_id()
      << " with its usual flags plus --recover_as_sole_voter; it becomes "
         "the only voter and leads alone\n"
      << "  3. stop every other old member and delete its data directory; "
         "never restart a lost member on its old data\n"
      << "  4. start fresh members (new ids, empty data dirs, --join "
         "--raft_address=...) and add each:\n"
      << "       dedupctl --address=" << best->address
      << " cluster add ID RAFT_ADDR CLIENT_ADDR\n"
      << "  5. remove --recover_as_sole_voter from node " << s.node_id()
      << "'s flags\n";
  return kExitOk;
}

}  // namespace dedup::ctl
