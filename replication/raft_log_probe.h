// What a node's Raft log on disk says, read without starting the engine:
// its terms, last entry and latest configuration. Disaster recovery
// (server/recovery.h) reads it before forcing a configuration, to compare
// this node's log with the other members' and to know who they are, and
// may reset a term that a bogus message pushed out of reach.
#ifndef DEDUP_REPLICATION_RAFT_LOG_PROBE_H_
#define DEDUP_REPLICATION_RAFT_LOG_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/consensus.h"

namespace dedup {

struct RaftLogSummary {
  uint64_t current_term = 0;  // the persisted term (metadata)
  uint64_t last_index = 0;    // 0: nothing in the log (a pristine node)
  // Term of the last entry (or of the snapshot that covers it): with
  // last_index, what Raft compares to tell which log is more up to date.
  uint64_t last_term = 0;
  // The highest term of any entry (or of the snapshot): a forced
  // configuration's entry has term 1, so it may exceed last_term.
  uint64_t max_term = 0;
  // The latest configuration in the log, committed or not (what the engine
  // would start with); empty when the log holds none.
  std::vector<Member> members;
  // Index of the entry (or snapshot) that set `members`.
  uint64_t config_index = 0;
};

// Reads the libraft 0.15 log in `dir` (segments and the last snapshot's
// metadata). Must not run while an engine uses `dir`. Loads every entry
// into memory for the duration of the call (bounded by the log budget).
// Closes any open segment, as a start would. `id` and `raft_address` are
// this node's (libraft's I/O wants them; nothing is sent or bound).
[[nodiscard]] absl::StatusOr<RaftLogSummary> ReadRaftLog(
    const std::string& dir, uint64_t id, const std::string& raft_address);

// Persists `term` as the current term of the log in `dir` (and no vote),
// as libraft would on seeing that term. Same conditions as ReadRaftLog.
// Only for disaster recovery: lowering a term is safe only on a node about
// to become the only voter, with every other member gone.
[[nodiscard]] absl::Status SetRaftTerm(const std::string& dir, uint64_t id,
                                       const std::string& raft_address,
                                       uint64_t term);

// Decodes a configuration as libraft 0.15 encodes it in a RAFT_CHANGE
// entry (raft_configuration_encode): format byte 1, u64 count, then per
// server u64 id, NUL-terminated address, u8 role; little-endian.
[[nodiscard]] absl::StatusOr<std::vector<Member>> DecodeRaftConfiguration(
    absl::string_view bytes);

// "1 voter 127.0.0.1:7001, 2 standby 127.0.0.2:7001", for log lines.
[[nodiscard]] std::string DescribeMembers(const std::vector<Member>& members);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_LOG_PROBE_H_
