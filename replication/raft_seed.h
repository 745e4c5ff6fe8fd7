// A new group's Raft log made from a restored state: the founding node's
// log starts with a snapshot at the state's applied index instead of an
// empty log, so the state and the log agree (entries up to that index are
// in the state) and every node added later receives the state by snapshot
// install, since the log holds no entry before it.
#ifndef DEDUP_REPLICATION_RAFT_SEED_H_
#define DEDUP_REPLICATION_RAFT_SEED_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dedup {

// Writes into `dir` (a pristine log: refused otherwise) term 1, no vote and
// a snapshot at `index` (term 1) whose configuration is node `id` alone, a
// voter at `raft_address`, and whose data is `snapshot_data` (what the
// state machine's Restore is given at start). Durable when it returns OK.
// Must not run while an engine uses `dir`.
[[nodiscard]] absl::Status SeedRaftLog(const std::string& dir, uint64_t id,
                                       const std::string& raft_address,
                                       uint64_t index,
                                       const std::string& snapshot_data);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_SEED_H_
