// The data dir side of hosting replicas while serving (daemon_hosting.cc).
#ifndef DEDUP_SERVER_DAEMON_HOSTING_H_
#define DEDUP_SERVER_DAEMON_HOSTING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dedup {

// Deletes group `group_id`'s directories in `data_dir` (GroupDir), durably:
// the raft directory is renamed away first and the parent synced, so from
// then on a restart no longer hosts the group (the restart rule,
// cluster_config.h) even if the deletion is cut short.
[[nodiscard]] absl::Status RemoveGroupDirsDurably(const std::string& data_dir,
                                                  uint32_t group_id);

// Removes what a deletion cut short left (the *.dropping directories).
void RemoveDroppedLeftovers(const std::string& data_dir);

// Clears what an earlier replica of `group_id` that is not hosted left (a
// state dir without its raft dir), so a new replica starts empty.
[[nodiscard]] absl::Status ClearUnhostedGroupDirs(const std::string& data_dir,
                                                  uint32_t group_id);

}  // namespace dedup

#endif  // DEDUP_SERVER_DAEMON_HOSTING_H_
