// The state machine of a replicated group as stored: the records plus the
// replicated metadata (the last applied log index, the replicated clock and
// the fence counter), all in one RocksDB that only Apply writes.
//
// Apply is deterministic: it runs the pure decisions of authority.h on the
// stored records with the entry's replicated time, and numbers fences from a
// counter kept in the same database. Replicas that apply the same entries in
// the same order therefore hold the same records, byte for byte, whatever
// their own clocks say. Each entry lands in one RocksDB write together with
// its log index, so a replay after a restart applies no entry twice (an
// index at or below applied_index() is skipped).
//
// The Raft log is the write-ahead log that counts: Apply writes RocksDB's own
// WAL without syncing it (a crash of the process loses nothing; a crash of
// the machine may lose a suffix, always a whole number of entries, which the
// log then applies again). The log may therefore be truncated only up to an
// index that SyncWal (or a memtable flush) has made durable.
//
// Thread safety: Apply, ReplaceWith and Close must not run concurrently with
// each other or with themselves (the replication loop calls them). SyncWal,
// Checkpoint, CompactAll, the accessors, Stats() and ComputeDigest() may be
// called from any thread at any time before Close (ReplaceWith waits for
// them, and they for it).
#ifndef DEDUP_STORAGE_REPLICATED_STATE_H_
#define DEDUP_STORAGE_REPLICATED_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/authority.h"
#include "storage/clock.h"
#include "storage/log_entry.h"
#include "storage/record.h"
#include "storage/store.h"

namespace dedup {

struct ReplicatedStateOptions {
  std::string path;
  size_t memory_budget_bytes = 128 << 20;
  // Expired records are dropped by compactions this long (in replicated
  // time) after expiry.
  int64_t compaction_grace_ms = 60'000;
  uint64_t periodic_compaction_s = 6 * 3600;
  // In-flight records whose leases are tracked for StoreStats.
  size_t max_tracked_leases = 1'000'000;
  // Namespaces whose stored bytes are counted (StoredBytesByNamespace).
  size_t max_tracked_namespaces = 100'000;
};

// The answer to one operation of an entry, by its type: BeginDecision
// (kBegin), FencedDecision (kComplete, kRelease, kRenew, kCheckpoint), the
// live record or nullopt (kGet), whether a live record was removed
// (kForget), true (kSetMember, an accepted kSetShardMap), or the error that
// refused this operation alone. Only the answers that give a stored result to
// the caller carry it (a DUPLICATE Begin's record, a Get's): in the others, a
// completed record's `result` is left empty.
using OpAnswer = std::variant<BeginDecision, FencedDecision,
                              std::optional<Record>, bool, absl::Status>;

// Decides, on the one node that answers an entry's callers, which stored
// results the answers may copy: a small request must not make the node
// hold one large result many times. Called on Apply's thread.
class ResultGate {
 public:
  virtual ~ResultGate() = default;
  // A DUPLICATE answer to operation `i` would copy `bytes` of stored
  // result: OK to copy them, or the error that answers operation `i`
  // instead (nothing is copied).
  [[nodiscard]] virtual absl::Status Admit(size_t i, size_t bytes) = 0;
};

// A gate that admits every result. Never destroyed.
[[nodiscard]] ResultGate* AdmitAllResults();

struct AppliedEntry {
  // The entry's index was at or below applied_index(): nothing was done
  // and `answers` is empty.
  bool skipped = false;
  // The replicated time the entry was decided at: max(entry.now_ms, the
  // replicated time before it).
  int64_t now_ms = 0;
  // One per operation, in order; empty when nobody answers (Apply without
  // a gate).
  std::vector<OpAnswer> answers;
  // Keys whose owner finished with them in this entry (Complete, Release,
  // Forget wrote them): what parked Begins wait for.
  std::vector<std::string> settled_keys;
  // A kSetMember changed Members().
  bool members_changed = false;
  // A kSetShardMap replaced ShardMap().
  bool shard_map_changed = false;
  // Bytes of stored records the apply read and held: each record the
  // entry names (a completed one without its result) plus the results it
  // copied into answers.
  uint64_t held_record_bytes = 0;
};

// A digest of the replicated state at one applied index: equal on replicas
// that applied the same entries. Covers the metadata and every record live
// at the replicated time (expired records are excluded: compactions drop them
// at different moments on different replicas).
struct StateDigest {
  uint64_t applied_index = 0;
  int64_t now_ms = 0;
  uint64_t live_records = 0;
  uint64_t hash = 0;  // FNV-1a 64 over length-prefixed keys and values
};

class ReplicatedState {
 public:
  // Opens (creating if missing) the database at options.path. Fails with
  // FailedPreconditionError when another process holds its lock.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReplicatedState>> Open(
      ReplicatedStateOptions options);

  virtual ~ReplicatedState() = default;

  // Applies `entry` as log entry `index` (see the class comment). An error
  // means nothing of the entry was written (a storage failure): the caller
  // must not go on to later entries.
  //
  // With a `gate`, the answers are built for the entry's callers, copying
  // stored results only as the gate admits. Without one (null: a replica
  // that answers nobody for this entry) only the state changes: no answer
  // is built and no stored result is read or copied, so what an entry
  // costs a replica does not grow with the results its operations name.
  [[nodiscard]] virtual absl::StatusOr<AppliedEntry> Apply(
      uint64_t index, const LogEntry& entry, ResultGate* gate) = 0;
  // Apply, answering every operation with every result.
  [[nodiscard]] absl::StatusOr<AppliedEntry> Apply(uint64_t index,
                                                   const LogEntry& entry) {
    return Apply(index, entry, AdmitAllResults());
  }

  [[nodiscard]] virtual uint64_t applied_index() const = 0;
  // The replicated time: the decision time of the last applied entry.
  [[nodiscard]] virtual int64_t now_ms() const = 0;
  // A clock reading now_ms(); owned by this object.
  [[nodiscard]] virtual const Clock* clock() const = 0;
  // The highest fence issued so far.
  [[nodiscard]] virtual uint64_t last_fence() const = 0;
  // Bytes of stored results Apply copied into answers since the state was
  // opened. Any thread.
  [[nodiscard]] virtual uint64_t result_bytes_answered() const = 0;

  // Makes every entry applied before the call durable (an fsync of the
  // WAL; Apply may go on meanwhile); returns an index it covers, at least
  // applied_index() as of the call.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> SyncWal() = 0;

  // Writes a consistent copy of the state into `dir` (which must not exist)
  // with hard links where it can; returns the applied index of the copy.
  // Apply may run meanwhile.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> Checkpoint(
      const std::string& dir) = 0;

  // Installs a snapshot: replaces the whole state with the database in
  // `incoming` (a checkpoint of another replica, every file durable; see
  // state_dir_swap.h for the crash-safe swap) and reloads the metadata.
  // `incoming` is consumed. On error the state is unusable: the caller
  // must stop (a restart finds either the old or the new copy).
  [[nodiscard]] virtual absl::Status ReplaceWith(
      const std::string& incoming) = 0;

  // The directory a snapshot for this state is fetched into before
  // ReplaceWith (beside the state's own directory, on the same file
  // system).
  [[nodiscard]] virtual std::string IncomingDir() const = 0;

  // Reads the applied index of a copy made by Checkpoint, without opening
  // it for writing.
  [[nodiscard]] static absl::StatusOr<uint64_t> AppliedIndexOf(
      const std::string& dir);

  [[nodiscard]] virtual absl::StatusOr<StateDigest> ComputeDigest() = 0;
  // The shard map last stored by a kSetShardMap, with its epoch; epoch 0
  // and no bytes when none was.
  struct StoredShardMap {
    uint64_t epoch = 0;
    std::string map;
  };
  [[nodiscard]] virtual absl::StatusOr<StoredShardMap> ShardMap() = 0;
  // Member id -> client address, as recorded by kSetMember operations.
  // O(members).
  [[nodiscard]] virtual absl::StatusOr<std::map<uint64_t, std::string>>
  Members() = 0;
  [[nodiscard]] virtual StoreStats Stats() = 0;
  // Bytes stored per namespace on this replica, as Store's (store.h): kept
  // by Apply and compaction drops from the scan after each open or
  // ReplaceWith. Any thread.
  [[nodiscard]] virtual StoredBytes StoredBytesByNamespace() const = 0;
  [[nodiscard]] virtual absl::Status CompactAll() = 0;
  // Counts record keys physically present (expired or not). O(records).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> CountStoredRecords() = 0;

  // Flushes and closes. Idempotent; later calls other than the accessors
  // fail with UNAVAILABLE.
  virtual absl::Status Close() = 0;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_REPLICATED_STATE_H_
