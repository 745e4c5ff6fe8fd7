// The durable authority: RocksDB holding one record per (namespace, key),
// with every operation a per-key atomic read-modify-write.
//
// Keys are partitioned over a fixed set of shards, each served by one storage
// thread. A shard thread takes everything queued since its last write, decides
// each operation with the pure state machine (authority.h) against the latest
// state (including earlier operations of the same batch), writes the whole
// batch with a single RocksDB write, and only then runs the callbacks. So no
// two operations on a key ever interleave. In `kSync` mode the write is not
// synced by the shard: one syncer thread fsyncs the WAL for everything all
// shards wrote meanwhile, and an answer (even a read's) leaves only once what
// it saw is on disk (wal_syncer.h). Shards go on deciding while it syncs.
//
// When the data dir's filesystem runs low or RocksDB cannot write, writes are
// refused at once with UNAVAILABLE saying why, reads go on, and writes come
// back by themselves once there is room or RocksDB has resumed
// (write_health.h). An existing data dir is checked before it is opened, so
// that a damaged one never starts with acknowledged data missing
// (data_dir_check.h).
//
// Thread safety: every public method may be called from any thread. Callbacks
// run on a storage thread, after the operation is durable per the mode; they
// must be quick and must not block (hand work elsewhere if needed).
#ifndef DEDUP_STORAGE_STORE_H_
#define DEDUP_STORAGE_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "storage/authority.h"
#include "storage/clock.h"
#include "storage/namespace_bytes.h"

namespace dedup {

enum class Durability {
  kSync,   // answered after the WAL is synced (group commit)
  kAsync,  // WAL written per batch, synced every async_sync_interval_ms
  kNone,   // no WAL; for tests and benchmarks; memtables flushed on Close
};

// Hears about storage writes, for metrics. Called on storage threads: must be
// thread-safe and quick.
class StoreObserver {
 public:
  virtual ~StoreObserver() = default;
  // In kSync mode: one WAL fsync made `operations` record writes (of every
  // shard) durable and took `seconds`. Otherwise: one RocksDB write carrying
  // `operations` record writes took `seconds`.
  virtual void OnWrite(int operations, double seconds) = 0;
};

struct StoreOptions {
  std::string path;
  Durability durability = Durability::kSync;
  int shards = 4;
  // Not owned; must outlive the store. Null means RealClock().
  const Clock* clock = nullptr;
  // Expired records are dropped by compactions this long after expiry.
  int64_t compaction_grace_ms = 60'000;
  // Every SST file is rewritten (and so filtered) at least this often, so
  // expired records in cold bottom files do not linger.
  uint64_t periodic_compaction_s = 6 * 3600;
  int64_t async_sync_interval_ms = 100;
  // Memory budget of RocksDB: the block cache and, charged to the same
  // cache, the memtables (half of it at most). Resident memory stays near
  // this plus a fixed overhead, whatever the number of records.
  size_t memory_budget_bytes = 128 << 20;
  // Most operations a shard puts in one write batch.
  int max_batch = 1024;
  // Operations a shard may have queued before new ones are refused with
  // RESOURCE_EXHAUSTED (overload protection: bounded memory and latency).
  size_t max_queued_per_shard = 100'000;
  // Not owned; null for none. Must outlive the store.
  StoreObserver* observer = nullptr;
  // In-flight records tracked in memory for lease statistics, per shard
  // (about 32 bytes each). Beyond it the statistics undercount.
  size_t max_tracked_inflight_per_shard = 250'000;
  // A call that finds its shard idle is answered on the caller's thread
  // when that needs no disk I/O (reads from memory only; writes only in
  // kNone and kSync, where they stay in memory until the WAL syncer takes
  // them), saving a thread hand-off or two. So callbacks may run before the
  // call returns (in kSync, on the syncer's thread or the caller's).
  bool answer_inline = true;
  // While RocksDB cannot write (disk full, I/O error), DB::Resume() is tried
  // this often; writes come back by themselves once it succeeds.
  int64_t write_retry_interval_ms = 1000;
  // Writes are refused while the data dir's filesystem has less free space
  // than this, and come back once it has more: RocksDB then never meets a
  // full disk, which it handles badly (storage/write_health.h). Room for
  // the WAL and flushes of every memtable, and for compactions. -1: the
  // memory budget (the memtables are at most half of it); 0: no check.
  int64_t min_free_disk_bytes = -1;
  // Before opening an existing database, every block of every table file is
  // checked (docs/decisions.md has the cost): a damaged file refuses
  // the start instead of failing the reads that meet it. The cheaper checks
  // (a data dir that lost acknowledged writes, a missing CURRENT, a table
  // file that cannot be opened) always run.
  bool verify_data_at_open = true;
  // Namespaces whose stored bytes are counted (StoredBytesByNamespace), per
  // shard; past it the figures say they are truncated.
  size_t max_tracked_namespaces = 100'000;
};

// Answer of a Begin that may have waited. `decision.record` is the record as
// the caller should see it.
struct BeginResult {
  BeginDecision decision;
  bool waited = false;
};

struct StoreStats {
  uint64_t estimated_records = 0;  // RocksDB's estimate, includes expired
  uint64_t expired_dropped = 0;    // by the compaction filter, this process
  // Of expired_dropped: tombstones whose retention ended.
  uint64_t tombstones_dropped = 0;
  // Expired completed records the compaction filter shrank into their
  // tombstone (result dropped), this process.
  uint64_t tombstones_made = 0;
  uint64_t waiting_begins = 0;   // Begins parked with wait_ms
  uint64_t inflight_leases = 0;  // in flight, lease live
  // In flight, lease ran out, nobody took over: usually a crashed owner.
  uint64_t lapsed_leases = 0;
  int64_t oldest_lapsed_lease_ms = 0;  // how long the oldest one has lapsed
  // More records are in flight than tracked, or the scan at open has not
  // finished (or failed): the lease figures undercount.
  bool inflight_tracking_saturated = false;
  uint64_t live_sst_bytes = 0;
  uint64_t pending_compaction_bytes = 0;
  uint64_t block_cache_usage_bytes = 0;
  uint64_t memtable_bytes = 0;
  // Writes are refused with UNAVAILABLE (see CheckServing): the data dir's
  // filesystem is below StoreOptions::min_free_disk_bytes, or RocksDB
  // cannot write (a full disk after all, an I/O error, a damaged file).
  // They come back by themselves when there is room again, or once a
  // retry of DB::Resume() succeeds; reads are still answered meanwhile.
  bool write_stopped = false;
  // Background errors RocksDB reported since the store opened (failed WAL
  // writes or syncs, flushes, compactions, retries), stopping or not.
  uint64_t background_errors = 0;
  // Times writes came back after being stopped.
  uint64_t write_resumes = 0;
  // While write_stopped: the message writes are refused with (why, and
  // whether they come back by themselves). Empty otherwise.
  std::string write_error;
  // Free space on the data dir's filesystem, as last measured (0 when the
  // check is off).
  uint64_t data_dir_free_bytes = 0;
};

// Error payloads (absl::Status::GetPayload) of a replicated store:
// - an UNAVAILABLE answered because this node is not the leader carries the
//   leader's client address (host:port) under kLeaderAddressPayload, when
//   one is known;
// - an ABORTED whose operation may or may not have been applied (leadership
//   was lost after it was proposed) carries kOutcomeUnknownPayload ("unknown").
inline constexpr absl::string_view kLeaderAddressPayload =
    "type.dedup/leader-address";
inline constexpr absl::string_view kOutcomeUnknownPayload =
    "type.dedup/outcome-unknown";

// Bytes of stored results the answers of one request may hold at once: a
// small BeginBatch naming one large result many times must not make the
// store hold (and the server send) gigabytes. Thread-safe.
class ResultBudget {
 public:
  explicit ResultBudget(int64_t bytes) : left_(bytes), bytes_(bytes) {}
  // Reserves `bytes`; false (nothing reserved) when they do not fit.
  [[nodiscard]] bool Take(int64_t bytes) {
    if (bytes == 0) return true;
    if (left_.fetch_sub(bytes, std::memory_order_relaxed) >= bytes) {
      return true;
    }
    left_.fetch_add(bytes, std::memory_order_relaxed);
    return false;
  }
  int64_t bytes() const { return bytes_; }

 private:
  std::atomic<int64_t> left_;
  const int64_t bytes_;
};

// Payload (any value) of the UNAVAILABLE answering a call whose result did
// not fit its ResultBudget, so the server can count them.
inline constexpr absl::string_view kResultBudgetPayload = "dedup.result_budget";

// That UNAVAILABLE: nothing happened (a DUPLICATE changes nothing), ask again.
[[nodiscard]] inline absl::Status ResultBudgetExceeded(
    const ResultBudget& budget) {
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "results: the answers to this request passed their ", budget.bytes(),
      " bytes of stored results; ask for this item again, alone or in a "
      "later batch"));
  status.SetPayload(kResultBudgetPayload, absl::Cord("1"));
  return status;
}

template <typename T>
using StoreCallback = absl::AnyInvocable<void(absl::StatusOr<T>) &&>;

class Store {
 public:
  // Opens (creating if missing) the database at options.path. Which records
  // are in flight (for lease statistics) is learnt by one scan in the
  // background, so opening takes no longer with more records; until the
  // scan is done, Stats() reports inflight_tracking_saturated. Fails with
  // FailedPreconditionError when another process holds the directory's lock,
  // with DataLossError when the directory is damaged or has lost
  // acknowledged writes (a WAL cut short or deleted, CURRENT missing, a
  // damaged table file: see storage/data_dir_check.h; the message names the
  // file and what to do), and with another error when the directory is
  // unusable. Never starts silently with acknowledged data missing.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Store>> Open(
      StoreOptions options);

  // Drains queued operations, answers parked waiters, flushes and closes.
  virtual ~Store() = default;

  // Begin. With wait_ms > 0 and an IN_USE answer, the call is parked until the
  // owner Completes, Releases, Forgets or its lease runs out, or wait_ms
  // passes, and is then decided again.
  virtual void Begin(std::string ns, std::string key, BeginParams params,
                     int64_t wait_ms, StoreCallback<BeginResult> done) = 0;
  virtual void Complete(std::string ns, std::string key, CompleteParams params,
                        StoreCallback<FencedDecision> done) = 0;
  virtual void Release(std::string ns, std::string key, uint64_t fence,
                       StoreCallback<FencedDecision> done) = 0;
  virtual void Renew(std::string ns, std::string key, uint64_t fence,
                     int64_t lease_ms, StoreCallback<FencedDecision> done) = 0;
  // Records the owner's progress on its in-flight record (DecideCheckpoint).
  virtual void Checkpoint(std::string ns, std::string key,
                          CheckpointParams params,
                          StoreCallback<FencedDecision> done) = 0;
  // Many independent Begins (wait_ms 0) or Completes at once: each shard
  // receives its share in one hand-off, so a batch RPC lands in few storage
  // writes instead of trickling in call by call. Each call is answered
  // through its own callback, exactly as by Begin/Complete.
  struct BeginCall {
    std::string ns;
    std::string key;
    BeginParams params;
    StoreCallback<BeginResult> done;
    // Shared by the calls of one request; null: no bound. A DUPLICATE whose
    // result does not fit what is left is answered UNAVAILABLE ("ask
    // again") at once instead of holding its copy of the result until the
    // batch's write is durable. Must outlive every `done`.
    ResultBudget* result_budget = nullptr;
  };
  virtual void BeginMany(std::vector<BeginCall> calls) = 0;
  struct CompleteCall {
    std::string ns;
    std::string key;
    CompleteParams params;
    StoreCallback<FencedDecision> done;
  };
  virtual void CompleteMany(std::vector<CompleteCall> calls) = 0;

  // nullopt when absent or expired.
  virtual void Get(std::string ns, std::string key,
                   StoreCallback<std::optional<Record>> done) = 0;
  // true when a live record was removed.
  virtual void Forget(std::string ns, std::string key,
                      StoreCallback<bool> done) = 0;

  // Fails fast when this store cannot take operations now: a replica that
  // is not the leader answers UNAVAILABLE with the leader's address (see
  // kLeaderAddressPayload). Operations submitted anyway are refused the
  // same way. Any thread.
  //
  // A single-node store that cannot write (StoreStats::write_stopped)
  // answers UNAVAILABLE "storage cannot write: <why>; <whether and when
  // writes come back>"; its writes submitted anyway are refused the same
  // way at once.
  [[nodiscard]] virtual absl::Status CheckServing() const {
    return absl::OkStatus();
  }
  // Like CheckServing, for calls that only read (Get): a store that cannot
  // write still answers reads from its durable state, so this stays OK
  // while CheckServing reports writes stopped.
  [[nodiscard]] virtual absl::Status CheckServingReads() const {
    return CheckServing();
  }

  // Answers every parked Begin now with its current decision, and from then
  // on answers Begins without parking them. For shutdown: in-flight RPCs
  // finish instead of waiting out their wait_ms.
  virtual void DrainWaiters() = 0;

  // Stops accepting work, drains queues, answers waiters, flushes memtables
  // and closes RocksDB. Idempotent; the destructor calls it. Later calls are
  // answered UNAVAILABLE. Must not run concurrently with CompactAll, Stats or
  // CountStoredRecords.
  virtual absl::Status Close() = 0;

  // Compacts the whole key space now, through the TTL filter.
  [[nodiscard]] virtual absl::Status CompactAll() = 0;

  [[nodiscard]] virtual StoreStats Stats() = 0;

  // The key and value bytes stored per namespace (namespace_bytes.h): kept
  // on every write and compaction drop, from the scan that runs after open
  // (incomplete until it is done). O(namespaces): about once a second. The
  // default counts nothing (incomplete). Any thread.
  [[nodiscard]] virtual StoredBytes StoredBytesByNamespace() const {
    return StoredBytes();
  }

  // Counts record keys physically present in RocksDB (expired or not) by a
  // full scan. For tests and tools: O(records).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> CountStoredRecords() = 0;

  // Writes a consistent copy of the database into `dir` (which must not
  // exist; on the data dir's file system, files are hard links where they
  // can be), holding every write answered before the call (memtables are
  // flushed into it). Writes go on meanwhile; answers that wait for a WAL
  // sync wait for the flush. For backups; blocks (never on a gRPC callback
  // thread). The default: UNIMPLEMENTED (a replicated store's copy is
  // ReplicatedStore::CreateOutgoingCheckpoint).
  [[nodiscard]] virtual absl::Status CreateCheckpoint(const std::string& dir) {
    return absl::UnimplementedError(
        absl::StrCat("this store cannot copy itself to ", dir));
  }
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_STORE_H_
