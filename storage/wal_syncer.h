// Group commit for durability kSync, pipelined: writers (shard threads, or
// callers answering inline) only append to RocksDB's in-memory WAL buffer
// (the DB is opened with manual_wal_flush) and hand their answers here; one
// thread writes and fsyncs the WAL for everything written meanwhile and then
// releases those answers. So no writer waits on the disk or even makes a
// system call, and one fsync serves all shards.
//
// Every answer goes through here, reads included: RocksDB makes an unsynced
// write visible at once, so a read may see state that a crash would still
// erase, and must not be answered before that state is durable.
#ifndef DEDUP_STORAGE_WAL_SYNCER_H_
#define DEDUP_STORAGE_WAL_SYNCER_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "storage/store.h"

namespace dedup {

// Thread-safe. Does not own `db` or `observer` (may be null); both must
// outlive it.
class WalSyncer {
 public:
  // Called once, with OK when what the caller saw is durable, else with the
  // error of the failed sync.
  using Release = absl::AnyInvocable<void(const absl::Status&) &&>;

  WalSyncer(rocksdb::DB* db, StoreObserver* observer);
  // Stops (see Stop).
  ~WalSyncer();

  WalSyncer(const WalSyncer&) = delete;
  WalSyncer& operator=(const WalSyncer&) = delete;

  // Runs `release` once every write visible now is durable. When that holds
  // already it runs at once, on the calling thread.
  void AfterSync(Release release);

  // Syncs and releases whatever is pending, then joins the thread. Later
  // calls sync on the caller's thread.
  void Stop();

 private:
  void Run();
  bool HasWorkLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Syncs the WAL unless durable_sequence_ covers every visible write
  // already, and then moves it up.
  absl::Status SyncNow();

  rocksdb::DB* const db_;
  StoreObserver* const observer_;
  // Highest RocksDB sequence number known to be on disk. 0 at start: what
  // recovery found may not have been synced by the last process.
  std::atomic<uint64_t> durable_sequence_{0};

  mutable absl::Mutex mu_;
  std::vector<Release> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes syncs, so that durable_sequence_ only grows.
  absl::Mutex sync_mu_;
  // The observer's count of writes per sync comes from sequence numbers (one
  // per record written, whichever thread wrote it): those above this one
  // are new. Starts at what the open found, which this process never wrote.
  uint64_t counted_sequence_ ABSL_GUARDED_BY(sync_mu_);

  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_WAL_SYNCER_H_
