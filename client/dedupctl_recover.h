// `dedupctl cluster recover`: after the status table, which node a group
// that lost its majority should be recovered from (dedupd
// --recover_as_sole_voter), and the steps. Writes only to `out`.
#ifndef DEDUP_CLIENT_DEDUPCTL_RECOVER_H_
#define DEDUP_CLIENT_DEDUPCTL_RECOVER_H_

#include <ostream>
#include <vector>

#include "client/dedupctl_cluster.h"

namespace dedup::ctl {

// From what the nodes answered: when one knows a leader, says the group is
// not lost and returns kExitRejected; else names the reachable node with
// the most up-to-date log (highest last log term, then last index; the
// lowest id among equals), prints the steps and returns kExitOk (or
// kExitRpcError when no node answered).
[[nodiscard]] int PrintRecoveryAdvice(std::ostream& out,
                                      const std::vector<NodeReport>& reports);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_RECOVER_H_
