// The Store of a node in a replicated group (cluster mode).
//
// Operations from any thread are queued; on the consensus thread the leader
// takes everything queued (up to a size limit) into one log entry stamped
// with its clock, and proposes it. Once a majority has stored the entry,
// every replica applies it in log order through ReplicatedState, and the
// leader answers the entry's callers from that apply. Reads (Get, and the
// DUPLICATE answers of Begin) go through the log too, so every answer is
// linearizable: a deposed leader can never answer from a stale state. Only
// the proposer builds answers (the other replicas apply the state changes
// alone and never read a stored result), and it copies a DUPLICATE's result
// only while the caller's batch has result budget left: what an entry costs
// a replica does not grow with the results its reads name.
//
// Errors, beyond the Store contract:
// - UNAVAILABLE with kLeaderAddressPayload: this node is not the leader
//   (nothing happened; ask the leader).
// - ABORTED with kOutcomeUnknownPayload: leadership was lost after the
//   operation was proposed; it may or may not take effect. Retrying is safe
//   for a Begin with the same owner (re-entrant) and a Complete with the
//   same fence and result (idempotent).
//
// Leadership transfers (TransferLeadership, also the hand-off of a leader
// short of disk space) and elections: while a transfer is in flight the
// engine refuses new entries, and while an election runs no node can name
// the leader. Operations that arrive meanwhile (on any member) are held,
// not refused, for at most max_transfer_hold_ms: once no transfer is in
// flight and a leader is known they are proposed if this node leads, else
// answered UNAVAILABLE naming the leader (kLeaderAddressPayload: nothing
// happened, send them there). A hold starts when this node starts a
// transfer, or when it stops knowing a leader it knew. Operations proposed
// before their entry lost its leader in a hold are not answered ABORTED at
// once: the new leader holds the entry (libraft hands leadership over only
// to an up-to-date voter), so they wait, again for at most
// max_transfer_hold_ms, to be answered from this node's own apply of it as
// a follower; only then is their outcome unknown. So a transfer costs
// callers a short wait, not an error. (CheckServing is OK while holding.)
//
// Begins with wait_ms park on the leader and are proposed again when their
// key is settled or their wait or observed lease runs out; when the node
// stops being the leader they are answered at once with their last
// decision (IN_USE with retry_after_ms).
//
// Thread safety: every public method may be called from any thread.
// Callbacks run on the consensus thread and must be quick.
#ifndef DEDUP_REPLICATION_REPLICATED_STORE_H_
#define DEDUP_REPLICATION_REPLICATED_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "replication/consensus.h"
#include "storage/clock.h"
#include "storage/replicated_state.h"
#include "storage/store.h"

namespace dedup {

// A member of the group as clients and peers know it.
struct ClusterNode {
  uint64_t id = 0;
  std::string raft_address;    // IPv4 literal host:port
  std::string client_address;  // host:port of its gRPC service
};

// Copies a checkpoint covering at least `min_applied_index` from the node
// serving clients at `address` into `dir` (which it creates), every file
// durable; returns the copy's applied index. Blocks until done, or fails
// soon after `*cancelled` (if not null) becomes true. Called on a thread of
// its own while the node runs, on the opening thread at a restart.
using FetchCheckpointFn = std::function<absl::StatusOr<uint64_t>(
    const std::string& address, uint64_t min_applied_index,
    const std::string& dir, const std::atomic<bool>* cancelled)>;

// Starts the consensus engine the store runs on, with the store as its state
// machine (not owned; the store stops the engine before it goes). Called
// once, by Open, after the state is open: StateMachine::Restore and Apply
// may run on the calling thread before it returns (a restart replays the
// log).
using ConsensusFactory =
    std::function<absl::StatusOr<std::unique_ptr<Consensus>>(StateMachine*)>;

struct ReplicatedStoreOptions {
  ReplicatedStateOptions state;
  // Required.
  ConsensusFactory consensus;
  // This node's id in the group (> 0), as the engine knows it: the
  // proposer of its entries and the taker of its snapshots.
  uint64_t node_id = 0;
  // The group this store replicates, named in its log lines (leader
  // changes) so a node hosting many groups says which one changed.
  uint32_t group_id = 0;
  // The engine's log directory: writes stop when its file system runs short
  // (min_free_disk_bytes).
  std::string log_dir;
  // Client addresses of the members, for leader hints.
  std::vector<ClusterNode> nodes;
  // The leader's clock, stamped on each entry. Not owned; null: RealClock.
  const Clock* clock = nullptr;
  // Limits of one log entry.
  size_t max_entry_ops = 4096;
  size_t max_entry_bytes = 4 << 20;
  // Entries proposed and not yet applied; more wait in the queue, where
  // they gather into bigger entries.
  int max_inflight_entries = 4;
  // Operations in the entries proposed and not yet applied (a soft bound:
  // an entry may pass it by up to its even share,
  // max_inflight_ops / max_inflight_entries). Every replica applies what one
  // quorum answer commits in one pass of its consensus thread, which sends no
  // heartbeat meanwhile; under a flood on a node short of CPU, bounding it
  // keeps those passes shorter than an election timeout.
  size_t max_inflight_ops = 4096;
  // Queued operations beyond which new ones get RESOURCE_EXHAUSTED.
  size_t max_queued = 100'000;
  // Bound of the wait of operations held by a leadership transfer (see
  // above). libraft ends a transfer within its election timeout; this
  // also covers the election that follows, until a leader is known.
  int64_t max_transfer_hold_ms = 2000;
  // Writes are refused while the filesystem of log_dir has less
  // free space than this, and a leader hands leadership to another member;
  // 0: no check. libraft 0.15 must never meet a full disk (a failed append
  // ends the process, see raft_consensus.cc), so this leaves room for the
  // log's preallocated segments and RocksDB's flushes.
  uint64_t min_free_disk_bytes = 0;
  // How a node that must install a snapshot gets the state (from the node
  // that took it, else from any other member). Null: such a node stops
  // with an error.
  FetchCheckpointFn fetch_checkpoint;
  // Called on the consensus thread after an applied entry replaced
  // StoredShardMap() (group 0's watchers read it then); must be quick.
  // May be empty.
  std::function<void()> shard_map_changed;
};

// Upper bounds (seconds) of the buckets of ReplicationCounters'
// leaderless_buckets.
inline constexpr double kLeaderlessBucketsS[] = {0.1, 0.25, 0.5, 1,
                                                 2,   5,    10,  30};

// Counts since this node started.
struct ReplicationCounters {
  // Spells without a known leader, observed when one is known again:
  // non-cumulative counts per kLeaderlessBucketsS bucket plus one for
  // larger values, and their sum.
  std::vector<uint64_t> leaderless_buckets =
      std::vector<uint64_t>(std::size(kLeaderlessBucketsS) + 1, 0);
  double leaderless_sum_s = 0;

  void ObserveLeaderless(double seconds) {
    size_t bucket = 0;
    while (bucket < std::size(kLeaderlessBucketsS) &&
           seconds > kLeaderlessBucketsS[bucket]) {
      ++bucket;
    }
    ++leaderless_buckets[bucket];
    leaderless_sum_s += seconds;
  }
  uint64_t entries_proposed = 0;
  uint64_t operations_proposed = 0;
  uint64_t unknown_outcomes = 0;
  // Operations that arrived while a leadership transfer was in flight
  // (held, not refused), and operations whose entry lost its leader yet
  // were answered from this node's apply of it (not outcome unknown).
  uint64_t transfer_held_operations = 0;
  uint64_t orphaned_operations_answered = 0;
  uint64_t snapshots_taken = 0;
  uint64_t snapshots_installed = 0;
  uint64_t snapshots_sent = 0;
};

// A checkpoint made for another node, in a directory of its own.
struct OutgoingCheckpoint {
  std::string dir;
  uint64_t applied_index = 0;
};

struct ClusterStatus {
  ConsensusStatus consensus;
  std::vector<ClusterNode> nodes;  // as configured
  uint64_t state_applied_index = 0;
  int64_t replicated_now_ms = 0;
  uint64_t last_fence = 0;
  // Bytes of stored results this node's applies copied into answers (only
  // for entries it proposed), since it started.
  uint64_t result_bytes_answered = 0;
  ReplicationCounters counters;
};

class ReplicatedStore : public Store {
 public:
  // Opens the state, then starts consensus (which may replay the log).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReplicatedStore>> Open(
      ReplicatedStoreOptions options);

  [[nodiscard]] virtual ClusterStatus GetClusterStatus() const = 0;
  [[nodiscard]] virtual absl::StatusOr<StateDigest> Digest() = 0;
  // OK, or UNAVAILABLE saying why while this node's data dir has less free
  // space than ReplicatedStoreOptions::min_free_disk_bytes, whatever its
  // role (a leader then refuses writes). Any thread.
  [[nodiscard]] virtual absl::Status CheckDiskSpace() const = 0;

  // The shard map stored in this replica's state (group 0, the meta group,
  // holds the cluster's), as of its last applied entry; epoch 0 when none
  // was stored. Any thread.
  [[nodiscard]] virtual absl::StatusOr<ReplicatedState::StoredShardMap>
  StoredShardMap() = 0;
  // Stores `map` (replication/shard_layout_codec.h) with `epoch` through
  // the log if the stored map's epoch is still `expected_epoch`: `done`
  // gets true once applied, FAILED_PRECONDITION when the epoch moved
  // meanwhile (read it again), or the usual refusals of a write (a
  // follower's UNAVAILABLE naming the leader; ABORTED, outcome unknown).
  // Any thread; `done` runs on the consensus thread.
  virtual void ProposeShardMap(uint64_t expected_epoch, uint64_t epoch,
                               std::string map, StoreCallback<bool> done) = 0;

  // Any thread (it blocks for a RocksDB flush: not on gRPC's callback
  // threads). A checkpoint of the state for a node installing a snapshot;
  // the caller removes `dir` when done with it.
  [[nodiscard]] virtual absl::StatusOr<OutgoingCheckpoint>
  CreateOutgoingCheckpoint() = 0;

  // Membership and leadership, on the leader (FAILED_PRECONDITION
  // elsewhere). `done` runs on the consensus thread.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  virtual void AddMember(ClusterNode node, Done done) = 0;
  virtual void RemoveMember(uint64_t id, Done done) = 0;
  virtual void TransferLeadership(uint64_t id, Done done) = 0;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_REPLICATED_STORE_H_
