// libraft's disk I/O on a stopped node's log, for the tools that read or
// prepare a log without starting the engine (raft_log_probe.h,
// raft_seed.h). Internal to replication/.
#ifndef DEDUP_REPLICATION_RAFT_OFFLINE_IO_H_
#define DEDUP_REPLICATION_RAFT_OFFLINE_IO_H_

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
}

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace dedup {

// Runs `action` on libraft's disk I/O for `dir` (initialized, not started:
// nothing is bound or sent; `action` may run the loop for the I/O's own
// requests), then closes it. Must not run while an engine uses `dir`.
[[nodiscard]] absl::Status WithRaftIo(
    const std::string& dir, uint64_t id, const std::string& raft_address,
    const std::function<void(struct raft_io&, uv_loop_t&)>& action);

// Frees what raft_io's load handed over: the snapshot (or null) and `n`
// entries (or null), whose buffers may share batch allocations.
void FreeLoaded(struct raft_snapshot* snapshot, struct raft_entry* entries,
                size_t n);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_OFFLINE_IO_H_
