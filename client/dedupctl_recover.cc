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

int PrintRecoveryAdvice(std::ostream& out,
                        const std::vector<NodeReport>& reports) {
  const NodeReport* best = nullptr;
  for (const NodeReport& report : reports) {
    if (!report.status.ok()) continue;
    const v1::ClusterStatusResponse& s = *report.status;
    if (s.leader_id() != 0) {
      out << "\nnode " << s.node_id() << " knows a leader (node "
          << s.leader_id()
          << "): the group is not lost, do not recover it. Replace lost "
             "members with `cluster remove` and `cluster add`.\n";
      return kExitRejected;
    }
    if (best == nullptr || MoreUpToDate(s, *best->status)) best = &report;
  }
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
