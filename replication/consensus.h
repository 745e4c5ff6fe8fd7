// Our narrow view of a consensus engine: propose opaque entries, have every
// committed entry applied in log order by a state machine, snapshots,
// membership and leadership. Nothing here names the engine (libraft), so it
// can be replaced without touching the state machine or the gRPC layer.
//
// Threading: an engine runs on one thread of its own (the consensus thread).
// Every StateMachine callback runs there, one at a time. Engine methods say
// which thread they may be called from.
#ifndef DEDUP_REPLICATION_CONSENSUS_H_
#define DEDUP_REPLICATION_CONSENSUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

enum class Role { kUnavailable, kFollower, kCandidate, kLeader };
const char* RoleName(Role role);

enum class MemberRole { kVoter, kStandby, kSpare };
const char* MemberRoleName(MemberRole role);

struct Member {
  uint64_t id = 0;
  std::string raft_address;  // IPv4 literal host:port
  MemberRole role = MemberRole::kVoter;
  // Leader only: highest index known to be replicated on it (0 elsewhere).
  uint64_t match_index = 0;
  // Leader only: a message from it arrived within the current election
  // timeout window (false elsewhere, and briefly after each window starts).
  bool recently_heard = false;
};

// A consistent reading of the engine's state, refreshed on the consensus
// thread (every few milliseconds and after each change).
struct ConsensusStatus {
  uint64_t id = 0;
  Role role = Role::kUnavailable;
  uint64_t term = 0;
  uint64_t leader_id = 0;  // 0: none known
  uint64_t commit_index = 0;
  uint64_t applied_index = 0;
  uint64_t last_index = 0;
  // Term of the entry at last_index: with it, what Raft compares to tell
  // which of two logs is more up to date.
  uint64_t last_log_term = 0;
  uint64_t leader_changes = 0;  // seen by this node since it started
  // Append requests to this node's log since it started, and the entries
  // in them. Each request is written and synced (the I/O backend may merge
  // several requests into one sync: an upper bound on log fsyncs).
  uint64_t log_appends = 0;
  uint64_t log_appended_entries = 0;
  // Entries between snapshots and kept behind one, as fitted to the log's
  // byte budget (see RaftOptions::log_budget_bytes).
  unsigned snapshot_threshold = 0;
  unsigned snapshot_trailing = 0;
  // Refreshes of this status so far: advances every few milliseconds while
  // the consensus thread runs (the liveness heartbeat,
  // server/liveness_watch.h).
  uint64_t ticks = 0;
  std::vector<Member> members;
};

// Implemented by the replicated store. Called on the consensus thread.
class StateMachine {
 public:
  virtual ~StateMachine() = default;
  // Applies the committed entry at `index`. An error stops this node from
  // applying further entries (its state would diverge otherwise).
  virtual absl::Status Apply(uint64_t index, absl::string_view entry) = 0;
  // A short description of the state as of the last applied entry (the
  // snapshot); the engine stores it and sends it to lagging nodes. The
  // state must be durable up to that entry when this returns: the engine
  // then drops the log before it. An error skips this snapshot.
  virtual absl::StatusOr<std::string> Snapshot() = 0;
  // Called when a leader sends the snapshot described by `descriptor`,
  // before the engine installs it. True when Restore(descriptor) can run
  // now without a transfer. Otherwise begins getting that state off the
  // consensus thread and returns false: the engine holds the snapshot back
  // (the node votes and times out as usual) and asks again later.
  virtual bool PrepareSnapshot(absl::string_view descriptor) = 0;
  // Brings the state to (at least) the snapshot described by `descriptor`,
  // taken by another node or by this one before a restart. While the engine
  // runs, only for a snapshot PrepareSnapshot said was ready.
  virtual absl::Status Restore(absl::string_view descriptor) = 0;
  // Every few milliseconds, with the engine's current status: role changes,
  // timers. Also at once when a received message changed the role or the
  // known leader, and before a TransferLeadership's `done` runs: the store
  // decides whom to name (or whether to propose) from the latest status.
  virtual void Tick(const ConsensusStatus& status) = 0;
};

class Consensus {
 public:
  virtual ~Consensus() = default;

  // Consensus thread only. Appends `entry` if this node is the leader:
  // returns FailedPreconditionError (nothing happened) when it is not.
  // Otherwise `done` runs later on the consensus thread: OK once the entry
  // was applied (after StateMachine::Apply returned for it), or
  // AbortedError when leadership was lost or the node stopped first (the
  // entry may still be committed by the next leader: outcome unknown).
  [[nodiscard]] virtual absl::Status Propose(
      std::string entry, absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Any thread: runs `fn` on the consensus thread, soon, in call order.
  // Dropped (never run) once Stop has begun.
  virtual void Post(absl::AnyInvocable<void() &&> fn) = 0;

  // Any thread.
  [[nodiscard]] virtual ConsensusStatus Status() const = 0;

  // Consensus thread only; leader only (FailedPreconditionError
  // otherwise). `done` runs on the consensus thread with the outcome.
  // AddMember adds a non-voter that becomes a voter once it caught up.
  virtual absl::Status AddMember(
      uint64_t id, const std::string& raft_address,
      absl::AnyInvocable<void(absl::Status) &&> done) = 0;
  virtual absl::Status RemoveMember(
      uint64_t id, absl::AnyInvocable<void(absl::Status) &&> done) = 0;
  // id 0: any up-to-date voter.
  virtual absl::Status TransferLeadership(
      uint64_t id, absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Any thread but the consensus thread. Stops the engine (pending
  // proposals end with AbortedError) and joins its thread. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_CONSENSUS_H_
