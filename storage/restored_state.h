// A replicated state restored from a backup into a new group
// (server/backup_restore.h), made to fit it before the node opens it.
//
// The copy carries the old group's kSetMember records (member id -> client
// address). In the new group they would override the addresses its nodes
// were started with: leader hints and snapshot sources would name the old
// group's nodes, and a joiner could fetch the old group's state. So they
// are dropped; the new group records its own as it adds members. So is
// the old cluster's shard map (kSetShardMap), whose replicas name the old
// nodes: the new group's leader stores the founding map of its own flags.
//
// Thread safety: none needed; the state is not open anywhere.
#ifndef DEDUP_STORAGE_RESTORED_STATE_H_
#define DEDUP_STORAGE_RESTORED_STATE_H_

#include <string>

#include "absl/status/status.h"

namespace dedup {

// Deletes every member record and the shard map from the replicated
// state's database in `dir` (closed; a copy made by
// ReplicatedState::Checkpoint), durably.
[[nodiscard]] absl::Status ForgetRecordedMembers(const std::string& dir);

}  // namespace dedup

#endif  // DEDUP_STORAGE_RESTORED_STATE_H_
