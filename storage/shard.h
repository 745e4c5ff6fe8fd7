// One storage thread and the keys hashed to it. Internal to the store.
//
// Whoever holds process_mu_ alone reads and writes the shard's keys, so a
// read-modify-write needs no per-key lock, and it alone owns the parked
// Begins (waiters) of those keys. That is the shard thread while it works
// through its queue, or, when the shard is idle, a caller answering one
// operation on its own thread (see Submit).
#ifndef DEDUP_STORAGE_SHARD_H_
#define DEDUP_STORAGE_SHARD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "storage/fence_allocator.h"
#include "storage/lease_tracker.h"
#include "storage/namespace_bytes.h"
#include "storage/store.h"
#include "storage/wal_syncer.h"
#include "storage/write_health.h"

namespace dedup {

struct BeginOp {
  std::string skey;
  BeginParams params;
  int64_t wait_deadline_ms = 0;  // 0: never park
  bool waited = false;
  StoreCallback<BeginResult> done;
  ResultBudget* result_budget = nullptr;  // see Store::BeginCall
};
struct CompleteOp {
  std::string skey;
  CompleteParams params;
  StoreCallback<FencedDecision> done;
};
struct ReleaseOp {
  std::string skey;
  uint64_t fence = 0;
  StoreCallback<FencedDecision> done;
};
struct RenewOp {
  std::string skey;
  uint64_t fence = 0;
  int64_t lease_ms = 0;
  StoreCallback<FencedDecision> done;
};
struct CheckpointOp {
  std::string skey;
  CheckpointParams params;
  StoreCallback<FencedDecision> done;
};
struct GetOp {
  std::string skey;
  StoreCallback<std::optional<Record>> done;
  // Read the state as of the last WAL sync (WalSyncer::DurableSnapshot)
  // and answer at once, without waiting for a sync: for reads while writes
  // are stopped, when no sync can happen.
  bool durable_only = false;
};
struct ForgetOp {
  std::string skey;
  StoreCallback<bool> done;
};
// Answers every parked Begin now and stops parking new ones (shutdown).
struct WakeAllOp {};

using Operation = std::variant<BeginOp, CompleteOp, ReleaseOp, RenewOp,
                               CheckpointOp, GetOp, ForgetOp, WakeAllOp>;

// Shared, read-only configuration of the shards. Pointers are not owned.
struct ShardContext {
  rocksdb::DB* db = nullptr;
  FenceAllocator* fences = nullptr;
  const Clock* clock = nullptr;
  rocksdb::WriteOptions write_options;
  int max_batch = 1024;
  size_t max_queued = 100'000;
  StoreObserver* observer = nullptr;
  size_t max_tracked_inflight = 250'000;
  // Submit may answer on the caller's thread when the shard is idle.
  bool answer_inline = true;
  // ...and then also write (memory-only writes: durability none).
  bool inline_writes = false;
  // Durability kSync: writes go out unsynced and every answer waits here
  // for the WAL fsync that covers what it saw. Null: answers leave once
  // written (write_options says how durably).
  WalSyncer* syncer = nullptr;
  // Held shared by every RocksDB call here that may write the WAL file (see
  // wal_syncer.h). Null when nothing syncs the WAL concurrently.
  absl::Mutex* wal_io_mu = nullptr;
  // Whether writes are stopped, for clear errors. May be null.
  WriteHealth* health = nullptr;
};

class Shard {
 public:
  // Starts the thread. `stored_bytes` (not owned, may be null) receives
  // this shard's changes to the bytes stored per namespace.
  explicit Shard(const ShardContext& context,
                 NamespaceBytes* stored_bytes = nullptr);
  // Stops (see Stop).
  ~Shard();

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Queues an operation. It is answered at once with UNAVAILABLE after Stop,
  // and with RESOURCE_EXHAUSTED when max_queued operations already wait.
  //
  // When the shard is idle (nothing queued or parked, its thread not
  // working), the operation may instead be decided and answered on the
  // calling thread, which saves two thread hand-offs. That path only ever
  // touches memory: it reads only what the memtables and block cache hold,
  // never waits for a write stall or a fence reservation, and writes only in
  // inline_writes mode. Anything else goes to the queue as before. Callers
  // must therefore expect `done` to run before Submit returns.
  void Submit(Operation op);
  // Queues several operations in one hand-off (same rules as Submit, per
  // operation).
  void SubmitMany(std::vector<Operation> ops);

  // Finishes queued operations, answers waiters, joins the thread.
  void Stop();

  [[nodiscard]] uint64_t waiting() const { return waiting_.load(); }

  // Registers an in-flight record found by the store's scan at open, which
  // runs in the background while the shard already serves. The scan's view
  // is older than anything the shard wrote since it began, so a record the
  // shard has written meanwhile keeps the shard's state. Any thread; no-op
  // after FinishSeeding.
  // `value`: the record as stored; `now_ms`: the clock at the scan.
  void SeedInflight(absl::string_view skey, absl::string_view value,
                    int64_t now_ms);
  // Ends seeding. Until then the lease figures undercount and say so (as
  // saturated); with `complete` false (the scan failed or was cut short by
  // Close) they keep saying so.
  void FinishSeeding(bool complete);

  // Adds this shard's in-flight records as of `now_ms` to `stats`.
  void AddLeaseStats(int64_t now_ms, StoreStats& stats) const;

 private:
  class Batch;
  struct Waiter {
    BeginOp op;
    int64_t next_check_ms = 0;
  };

  void Run();
  // Submit's same-thread path: true if `op` was answered (done has run).
  bool TryAnswerInline(Operation& op);
  // Decides `op` on the caller's thread; returns what delivers its answer
  // (given the sync status), or null if the shard thread must take it.
  template <typename Op>
  WalSyncer::Release AnswerInline(Op& op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // Records are tracked by a 64-bit hash of their key, not the key: no
  // allocation per Begin, and a collision (odds ~1e-7 at the cap) only
  // merges two entries of a statistic.
  // Writes `batch` (then mirrors it into inflight_ and tells the observer).
  // Its answers are not released: see Release.
  absl::Status Commit(Batch& batch, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // Runs the answers of a committed `batch`, through the syncer if any.
  void Release(Batch& batch, const absl::Status& committed);
  // Runs `release` once the state it saw is durable: at once without a
  // syncer (the write itself was), else after the WAL fsync covering it.
  void WhenDurable(WalSyncer::Release release);
  // Mirrors a committed batch's final states into leases_.
  void UpdateInflight(Batch& batch, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  bool HasWorkLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `last`: the shard is stopping and this is its final cycle.
  // Decides `ops` into `batch` and commits it; the caller then runs the
  // batch's completions with the returned status.
  absl::Status ProcessBatch(Batch& batch, std::vector<Operation>& ops,
                            bool last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  void Process(Batch& batch, Operation& op, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  void ProcessBegin(Batch& batch, BeginOp op, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // A fence for a Begin decided on the shard thread.
  absl::StatusOr<uint64_t> NextFence();
  // Answers a durable_only Get from the last synced state.
  void ProcessDurableGet(GetOp& op, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  void Park(BeginOp op, int64_t next_check_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  BeginOp Unpark(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // Decides again every Begin parked on `skey` (after its owner finished).
  void WakeKey(Batch& batch, const std::string& skey, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // Decides again the Begins whose wait or observed lease ran out.
  void WakeDue(Batch& batch, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);
  // Answers every parked Begin now, without parking again.
  void WakeAll(Batch& batch, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_);

  const ShardContext context_;

  // Held while deciding and committing operations (see the class comment).
  // Taken after mu_ is released, never the other way round.
  absl::Mutex process_mu_;
  absl::Mutex mu_;
  std::deque<Operation> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The shard thread has taken operations off queue_ and not yet committed
  // them. Inline answers wait for it too, or an operation submitted later
  // could be decided before one submitted earlier (the shard is FIFO).
  bool taken_ ABSL_GUARDED_BY(mu_) = false;

  // Waiters.
  bool draining_ ABSL_GUARDED_BY(process_mu_) = false;  // Begins never park
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(process_mu_) = 1;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(process_mu_);
  absl::flat_hash_map<std::string, std::vector<uint64_t>> waiters_by_key_
      ABSL_GUARDED_BY(process_mu_);
  // (next_check_ms, id)
  std::set<std::pair<int64_t, uint64_t>> timers_ ABSL_GUARDED_BY(process_mu_);
  // Earliest timer, readable under mu_ for the thread's timed wait.
  std::atomic<int64_t> next_timer_ms_{INT64_MAX};
  std::atomic<uint64_t> waiting_{0};

  // In-flight records of this shard, so lease statistics need no scan.
  // Written by the shard thread after each commit, read by Stats().
  // Leases of the shard's in-flight records (seeding from construction).
  LeaseTracker leases_;
  NamespaceBytes* const stored_bytes_;

  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_SHARD_H_
