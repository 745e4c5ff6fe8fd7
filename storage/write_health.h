// Whether the store can write now, and what brings writes back.
//
// Two things stop writes:
//
// 1. Too little free space on the data dir's filesystem (below
//    `min_free_bytes`). Checked every few milliseconds while writes go on,
//    so that RocksDB itself never meets a full disk in the common case:
//    RocksDB 7.8 handles that badly (see below). Writes come back as soon as
//    there is room again; nothing needs recovering.
// 2. An error RocksDB must recover from: a full disk after all (another
//    process filled it faster than the check), an I/O error on the WAL, a
//    failed flush or MANIFEST write, a damaged file met by a compaction.
//    This listener hears of every background error as RocksDB sets it
//    (OnBackgroundError runs before the failing call returns), so the WAL
//    syncer never touches a WAL file that has failed: in RocksDB 7.8 a
//    second flush of such a file escalates the error to fatal (no Resume()
//    until a restart), and Debian's assertion-enabled build aborts on a
//    sync of it. RocksDB's own recovery is disabled (it polls every 5 s and
//    only once free space exceeds the write buffer size, and a manual
//    Resume() answers Busy meanwhile); instead DB::Resume() is tried every
//    retry interval once there is room: it flushes the memtables to new SST
//    files and starts a new WAL, so whatever a failed WAL write left only in
//    memory becomes durable (it was never acknowledged: its callers got the
//    error). Errors RocksDB cannot resume from (fatal or unrecoverable) keep
//    writes stopped until a restart, and so does a Resume() that never
//    returns (RocksDB 7.8 can wait forever for a flush it scheduled before
//    the error and then dropped); the message says so.
//
// While stopped, new writes are refused at once with UNAVAILABLE and a
// message saying why and whether they come back by themselves.
//
// Thread safety: every method may be called from any thread.
#ifndef DEDUP_STORAGE_WRITE_HEALTH_H_
#define DEDUP_STORAGE_WRITE_HEALTH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rocksdb/db.h"
#include "rocksdb/listener.h"
#include "storage/store.h"

namespace dedup {

struct WriteHealthOptions {
  // The data dir: its filesystem's free space is watched.
  std::string path;
  // Writes stop while the filesystem has less free space than this; 0
  // disables the check.
  uint64_t min_free_bytes = 0;
  // How often DB::Resume() is tried after a RocksDB error.
  int64_t retry_interval_ms = 1000;
};

class WriteHealth : public rocksdb::EventListener {
 public:
  explicit WriteHealth(WriteHealthOptions options);
  ~WriteHealth() override;

  // Sets the options that hand recovery to this object (no automatic
  // resume by RocksDB) and registers it as a listener of `options`.
  static void Install(const std::shared_ptr<WriteHealth>& health,
                      rocksdb::Options& options);

  // Starts the thread that watches free space and retries Resume() on the
  // opened `db`, which it calls holding `wal_io_mu` shared (see WalSyncer;
  // null for none). Both must outlive Stop.
  void Start(rocksdb::DB* db, absl::Mutex* wal_io_mu);
  // Joins that thread; idempotent. Before the database closes.
  void Stop();

  // New writes are refused (for either reason above).
  [[nodiscard]] bool write_stopped() const {
    return rocksdb_error_.load(std::memory_order_acquire) ||
           space_low_.load(std::memory_order_acquire);
  }
  // RocksDB reported an error: the WAL must not be written or synced, and
  // reads must not wait for a sync.
  [[nodiscard]] bool rocksdb_error() const {
    return rocksdb_error_.load(std::memory_order_acquire);
  }
  // OK, or UNAVAILABLE "storage cannot write: <why>; ..." saying whether
  // and when writes come back by themselves.
  [[nodiscard]] absl::Status CheckWritable() const;
  // CheckWritable, for a RocksDB error only: OK while only space is low.
  [[nodiscard]] absl::Status CheckWalUsable() const;

  // Before writing: measures free space again if it was not measured in the
  // last few milliseconds, and answers write_stopped(). Cheap.
  [[nodiscard]] bool StoppedBeforeWrite();

  // One of our own calls (a WAL sync, a write) failed: writes stop until a
  // Resume succeeds, even if RocksDB reported no background error.
  void OnWriteFailed(const rocksdb::Status& status);

  // Fills write_stopped, background_errors, write_resumes, write_error and
  // data_dir_free_bytes.
  void AddTo(StoreStats& stats) const;

  // rocksdb::EventListener
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                         rocksdb::Status* bg_error) override;
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason reason,
                            rocksdb::Status bg_error,
                            bool* auto_recovery) override;

 private:
  void Loop();
  // Measures free space and updates space_low_.
  void CheckSpace();
  void TryResume();
  void Record(const rocksdb::Status& error, bool stops_writes);
  std::string RocksDbErrorMessageLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const WriteHealthOptions options_;
  rocksdb::DB* db_ = nullptr;
  absl::Mutex* wal_io_mu_ = nullptr;

  std::atomic<bool> rocksdb_error_{false};
  std::atomic<bool> space_low_{false};
  std::atomic<uint64_t> free_bytes_{0};
  std::atomic<int64_t> space_checked_ns_{0};  // steady clock

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool needs_resume_ ABSL_GUARDED_BY(mu_) = false;  // any error, even soft
  // Bumped by every error, so a Resume that succeeded does not clear an
  // error reported while it ran.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_ ABSL_GUARDED_BY(mu_);  // while rocksdb_error_
  bool resumable_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resumes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time stopped_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_resume_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // While a Resume() runs: since when.
  absl::Time resume_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_WRITE_HEALTH_H_
