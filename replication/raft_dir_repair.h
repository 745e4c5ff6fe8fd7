// Repairs two states of a libraft 0.15 raft_uv directory that an interrupted
// libraft write leaves behind and that libraft cannot get out of itself.
// RaftConsensus::Start runs them before libraft opens the directory.
//
// 1. Interrupted truncation. To drop the entries from index k on out of the
//    closed segment `A-B` (A < k <= B), libraft writes `A-(k-1)` durably,
//    then unlinks `A-B` and every later closed segment, then fsyncs the
//    directory. A power cut or a kill between the two leaves `A-(k-1)` next
//    to `A-B` (and maybe later segments); libraft's load then fails ("first
//    index should have been ..."), or, with a snapshot, may pick either file.
//    The entries from k on were never committed (libraft truncates only
//    uncommitted entries), so finishing the truncation is safe.
// 2. Interrupted bootstrap. libraft persists term 1 before it writes the
//    first segment; a cut between the two leaves metadata at term 1 with no
//    log, and every later bootstrap is refused ("metadata contains term 1"),
//    so a founder would run with no configuration. No vote was cast at term
//    1 and nothing else was written, so removing the metadata is safe.
//
// Both only remove files, and only in exactly those states; a directory in
// any other state (healthy, pristine, or damaged some other way) is left
// untouched. Each removal is logged (common/log.h) and made durable with an
// fsync of the directory before they return.
//
// Thread safety: none needed; must not run while libraft (or ReadRaftLog)
// uses `dir`.
#ifndef DEDUP_REPLICATION_RAFT_DIR_REPAIR_H_
#define DEDUP_REPLICATION_RAFT_DIR_REPAIR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup {

// Repair 1. When two or more closed segments share a first index A, keeps
// the one with the smallest end E and removes the others sharing A and
// every closed segment whose first index is above E. Does nothing when no
// first index is shared, or when an open segment holds data (a truncation
// never leaves one: libraft finalizes open segments before it truncates).
// Returns the names of the removed files (empty: nothing was done). An
// error: a file could not be read or removed, or the directory not synced.
[[nodiscard]] absl::StatusOr<std::vector<std::string>>
RepairInterruptedTruncation(const std::string& dir);

// Repair 2. When the metadata (metadata1/metadata2, read as libraft does)
// says term 1 and no vote, and the directory holds no closed segment, no
// open segment with data and no snapshot file, removes metadata1 and
// metadata2. Only for a node that bootstraps the group (a founder): a
// joining node waits for the leader's log and never bootstraps. Returns
// the names of the removed files (empty: nothing was done).
[[nodiscard]] absl::StatusOr<std::vector<std::string>>
RepairInterruptedBootstrap(const std::string& dir);

// Both repairs, the second only for a founder (`founder`: the node would
// call raft_bootstrap).
[[nodiscard]] absl::Status RepairRaftDir(const std::string& dir, bool founder);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_DIR_REPAIR_H_
