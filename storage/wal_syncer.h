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
//
// A WAL file that failed a write must not be written or synced again: in
// RocksDB 7.8 that makes the error fatal (no Resume() until a restart), and
// Debian's assertion-enabled build aborts on the sync. So nothing else may
// touch the WAL file while the syncer writes it: every RocksDB call
// that can write the WAL file (a write, whose buffer may overflow or switch
// memtables; a flush; Resume) holds `wal_io_mu` shared, the syncer holds it
// exclusively, and it syncs only while WriteHealth reports no RocksDB error
// (while only free space is low, what was written is still synced). Any
// such call that fails has reported its error to WriteHealth before it
// returns, so the syncer sees it. The syncer holds it only while it writes
// RocksDB's WAL buffer to the file (a write(2) into the page cache), not
// during the fsync: writers go on appending meanwhile, and each fsync covers
// everything written before it. The sync checks WriteHealth again just
// before the fsync; a WAL write failing in between (microseconds) is the
// one race left, and costs a restart at worst.
#ifndef DEDUP_STORAGE_WAL_SYNCER_H_
#define DEDUP_STORAGE_WAL_SYNCER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rocksdb/db.h"
#include "storage/durable_marker.h"
#include "storage/store.h"
#include "storage/write_health.h"

namespace dedup {

inline constexpr absl::Duration kMarkerSyncInterval = absl::Milliseconds(100);

// What a syncer works with besides the database. Pointers are not owned,
// may be null, and must outlive the syncer.
struct WalSyncerContext {
  StoreObserver* observer = nullptr;
  // Gates syncs (none after a RocksDB error, WriteHealth::rocksdb_error)
  // and hears of failed ones.
  WriteHealth* health = nullptr;
  // Advanced after every successful sync, and fsynced by the syncer thread
  // at most every kMarkerSyncInterval once answers are released, so that a
  // power cut loses at most that much of the mark and the data-dir check
  // still sees a loss of writes acknowledged before it.
  DurableMarker* marker = nullptr;
  // See the file comment. Null: the caller guarantees that nothing else
  // writes the WAL file meanwhile (tests).
  absl::Mutex* wal_io_mu = nullptr;
};

// Thread-safe. Does not own `db`, which must outlive it.
class WalSyncer {
 public:
  // Called once, with OK when what the caller saw is durable, else with the
  // error of the failed sync.
  using Release = absl::AnyInvocable<void(const absl::Status&) &&>;

  WalSyncer(rocksdb::DB* db, StoreObserver* observer);
  WalSyncer(rocksdb::DB* db, const WalSyncerContext& context);
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

  // A snapshot of the state as of the last successful sync: everything it
  // shows is durable, so a read through it may be answered without a sync
  // (while writes are stopped, reads are answered this way). Null before
  // the first sync of this process and after Stop.
  [[nodiscard]] std::shared_ptr<const rocksdb::Snapshot> DurableSnapshot()
      const;

 private:
  void Run();
  bool HasWorkLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // On the syncer thread, after answers are released.
  void SyncMarkerIfDue(bool idle);
  // Syncs the WAL unless durable_sequence_ covers every visible write
  // already, and then moves it up.
  absl::Status SyncNow();

  rocksdb::DB* const db_;
  const WalSyncerContext context_;
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
  mutable absl::Mutex snapshot_mu_;
  std::shared_ptr<const rocksdb::Snapshot> durable_snapshot_
      ABSL_GUARDED_BY(snapshot_mu_);

  // Only the syncer thread touches these.
  bool marker_dirty_ = false;
  std::chrono::steady_clock::time_point marker_synced_at_{};

  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_WAL_SYNCER_H_
