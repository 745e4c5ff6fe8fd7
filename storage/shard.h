// One storage thread and the keys hashed to it. Internal to the store.
//
// The thread alone reads and writes its keys, so a read-modify-write needs no
// per-key lock, and it alone owns the parked Begins (waiters) of those keys.
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
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "storage/fence_allocator.h"
#include "storage/store.h"

namespace dedup {

struct BeginOp {
  std::string skey;
  BeginParams params;
  int64_t wait_deadline_ms = 0;  // 0: never park
  bool waited = false;
  StoreCallback<BeginResult> done;
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
struct GetOp {
  std::string skey;
  StoreCallback<std::optional<Record>> done;
};
struct ForgetOp {
  std::string skey;
  StoreCallback<bool> done;
};
// Answers every parked Begin now and stops parking new ones (shutdown).
struct WakeAllOp {};

using Operation = std::variant<BeginOp, CompleteOp, ReleaseOp, RenewOp, GetOp,
                               ForgetOp, WakeAllOp>;

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
};

// Lease bookkeeping of one in-flight record.
struct InflightLease {
  int64_t lease_until_ms = 0;
  int64_t expire_at_ms = 0;
};

class Shard {
 public:
  // Starts the thread.
  explicit Shard(const ShardContext& context);
  // Stops (see Stop).
  ~Shard();

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Queues an operation. It is answered at once with UNAVAILABLE after Stop,
  // and with RESOURCE_EXHAUSTED when max_queued operations already wait.
  void Submit(Operation op);
  // Queues several operations in one hand-off (same rules as Submit, per
  // operation).
  void SubmitMany(std::vector<Operation> ops);

  // Finishes queued operations, answers waiters, joins the thread.
  void Stop();

  [[nodiscard]] uint64_t waiting() const { return waiting_.load(); }

  // Registers an in-flight record found on disk. Only before the first
  // Submit (the store seeds its shards while opening).
  void SeedInflight(absl::string_view skey, InflightLease lease);

  // Adds this shard's in-flight records as of `now_ms` to `stats`.
  void AddLeaseStats(int64_t now_ms, StoreStats& stats) const;

 private:
  class Batch;
  struct Waiter {
    BeginOp op;
    int64_t next_check_ms = 0;
  };

  void Run();
  // Records are tracked by a 64-bit hash of their key, not the key: no
  // allocation per Begin, and a collision (odds ~1e-7 at the cap) only
  // merges two entries of a statistic.
  static uint64_t InflightId(absl::string_view skey);
  void TrackInflightLocked(uint64_t id, InflightLease lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(inflight_mu_);
  // Mirrors a committed batch's final states into inflight_.
  void UpdateInflight(Batch& batch, int64_t now_ms);
  bool HasWorkLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `last`: the shard is stopping and this is its final cycle.
  void ProcessBatch(std::vector<Operation>& ops, bool last);
  void Process(Batch& batch, Operation& op, int64_t now_ms);
  void ProcessBegin(Batch& batch, BeginOp op, int64_t now_ms);
  void Park(BeginOp op, int64_t next_check_ms);
  BeginOp Unpark(uint64_t id);
  // Decides again every Begin parked on `skey` (after its owner finished).
  void WakeKey(Batch& batch, const std::string& skey, int64_t now_ms);
  // Decides again the Begins whose wait or observed lease ran out.
  void WakeDue(Batch& batch, int64_t now_ms);
  // Answers every parked Begin now, without parking again.
  void WakeAll(Batch& batch, int64_t now_ms);

  const ShardContext context_;

  absl::Mutex mu_;
  std::deque<Operation> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Waiters: touched only by the shard thread.
  bool draining_ = false;  // set by WakeAllOp: Begins no longer park
  uint64_t next_waiter_id_ = 1;
  std::map<uint64_t, Waiter> waiters_;
  absl::flat_hash_map<std::string, std::vector<uint64_t>> waiters_by_key_;
  std::set<std::pair<int64_t, uint64_t>> timers_;  // (next_check_ms, id)
  // Earliest timer, readable under mu_ for the thread's timed wait.
  std::atomic<int64_t> next_timer_ms_{INT64_MAX};
  std::atomic<uint64_t> waiting_{0};

  // In-flight records of this shard, so lease statistics need no scan.
  // Written by the shard thread after each commit, read by Stats().
  mutable absl::Mutex inflight_mu_;
  absl::flat_hash_map<uint64_t, InflightLease> inflight_
      ABSL_GUARDED_BY(inflight_mu_);
  bool inflight_saturated_ ABSL_GUARDED_BY(inflight_mu_) = false;
  int64_t next_inflight_sweep_ms_ = 0;  // shard thread only

  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_SHARD_H_
