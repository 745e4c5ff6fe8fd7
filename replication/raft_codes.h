// The seam between libraft 0.15 and our Consensus interface: role and error
// code conversions, and the stop of a node whose disk failed a write. Used
// only by raft_consensus.cc, on the Raft loop thread (none of it keeps
// state, so any thread may call it).
#ifndef DEDUP_REPLICATION_RAFT_CODES_H_
#define DEDUP_REPLICATION_RAFT_CODES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"
#include "replication/consensus.h"

struct raft;

namespace dedup {

// Exit code of a node whose disk failed a Raft log append or a state
// machine write (see StopOnStorageFailure).
inline constexpr int kExitStorageFailure = exit_code::kStorageFailure;

// RAFT_VOTER, RAFT_STANDBY or RAFT_SPARE.
[[nodiscard]] int ToRaftRole(MemberRole role);
[[nodiscard]] MemberRole FromRaftRole(int role);
// RAFT_FOLLOWER/CANDIDATE/LEADER; anything else is kUnavailable.
[[nodiscard]] Role FromRaftState(int state);

// A libraft return code `rv` as a status: FAILED_PRECONDITION for "not the
// leader" or a change that cannot be made now, ABORTED when leadership was
// lost (the outcome is unknown), INVALID_ARGUMENT for a bad member,
// UNAVAILABLE otherwise. `r` (may be null) adds the engine's last message.
[[nodiscard]] absl::Status RaftError(int rv, absl::string_view what,
                                     struct raft* r);

// "<text> (<rv>): <detail>" for a failed log append (libraft 0.15's
// raft_strerror has no text for RAFT_NOSPACE).
[[nodiscard]] std::string AppendError(int rv, const char* detail);

// Ends the process after a failed append or apply, before libraft 0.15
// handles the failure itself. What it would do is worse than a restart
// (found by filling a node's disk in a 3-node group): a leader whose append
// fails neither steps down nor stops, and proposes its next entry at the
// same index in the same term, so followers that stored the failed one keep
// a different entry there (replicas diverge); a follower whose append fails
// goes on writing later entries at shifted indexes; a state machine apply
// that fails makes a follower's Raft stop for good, silently. A restart is
// safe: nothing that failed was acknowledged by this node, the log on disk
// ends at its last complete append, and the entries after it come again
// from the leader (or, for a leader, from the member that takes over).
[[noreturn]] void StopOnStorageFailure(const std::string& what);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_CODES_H_
