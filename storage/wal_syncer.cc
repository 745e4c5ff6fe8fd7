#include "storage/wal_syncer.h"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup {

WalSyncer::WalSyncer(rocksdb::DB* db, StoreObserver* observer)
    : WalSyncer(db, WalSyncerContext{observer}) {}

WalSyncer::WalSyncer(rocksdb::DB* db, const WalSyncerContext& context)
    : db_(db),
      context_(context),
      counted_sequence_(db->GetLatestSequenceNumber()),
      thread_([this] { Run(); }) {}

WalSyncer::~WalSyncer() { Stop(); }

void WalSyncer::AfterSync(Release release) {
  // Taken after the caller's reads and writes, so it covers all they saw.
  const uint64_t visible = db_->GetLatestSequenceNumber();
  if (visible <= durable_sequence_.load(std::memory_order_acquire)) {
    std::move(release)(absl::OkStatus());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      pending_.push_back(std::move(release));
      return;
    }
  }
  std::move(release)(SyncNow());
}

void WalSyncer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // Released before the database closes (RocksDB refuses to close with a
  // snapshot held); nobody reads through it once the shards have stopped.
  absl::MutexLock lock(&snapshot_mu_);
  durable_snapshot_.reset();
}

std::shared_ptr<const rocksdb::Snapshot> WalSyncer::DurableSnapshot() const {
  absl::MutexLock lock(&snapshot_mu_);
  return durable_snapshot_;
}

void WalSyncer::Run() {
  for (;;) {
    std::vector<Release> releases;
    bool quiet = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition has_work(this, &WalSyncer::HasWorkLocked);
      // A mark left unsynced by the last burst is synced once things go
      // quiet, so an idle node's marker is never behind for long.
      if (marker_dirty_) {
        quiet = !mu_.AwaitWithTimeout(has_work, kMarkerSyncInterval);
      } else {
        mu_.Await(has_work);
      }
      if (!quiet && pending_.empty()) {
        stopped_ = true;  // stopping_, and nothing left to release
        return;
      }
      releases.swap(pending_);
    }
    if (quiet) {
      SyncMarkerIfDue(/*idle=*/true);
      continue;
    }
    // Everything pending was visible before this sync starts, so it covers
    // them all; whatever arrives meanwhile waits for the next one.
    const absl::Status synced = SyncNow();
    for (Release& release : releases) std::move(release)(synced);
    if (synced.ok()) SyncMarkerIfDue(/*idle=*/false);
  }
}

void WalSyncer::SyncMarkerIfDue(bool idle) {
  if (context_.marker == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  marker_dirty_ = true;
  if (!idle && now - marker_synced_at_ <
                   absl::ToChronoNanoseconds(kMarkerSyncInterval)) {
    return;
  }
  // A failure only leaves the marker behind, which never refuses a good
  // directory; the WAL's own health is judged by the syncs.
  (void)context_.marker->Sync();
  marker_synced_at_ = now;
  marker_dirty_ = false;
}

bool WalSyncer::HasWorkLocked() const { return !pending_.empty() || stopping_; }

absl::Status WalSyncer::SyncNow() {
  absl::MutexLock lock(&sync_mu_);
  if (context_.health != nullptr) {
    // Before waiting for the WAL: a failed one answers at once. (While only
    // space is low, what was written is still synced.)
    if (absl::Status s = context_.health->CheckWalUsable(); !s.ok()) return s;
  }
  if (db_->GetLatestSequenceNumber() <=
      durable_sequence_.load(std::memory_order_relaxed)) {
    return absl::OkStatus();
  }
  std::optional<absl::WriterMutexLock> io;
  if (context_.wal_io_mu != nullptr) io.emplace(context_.wal_io_mu);
  // Nobody appends now, so the latest sequence number and the WAL buffer
  // stay as they are until the sync is done.
  if (context_.health != nullptr) {
    if (absl::Status s = context_.health->CheckWalUsable(); !s.ok()) return s;
  }
  const auto start = std::chrono::steady_clock::now();
  // What this sync makes durable, and a view of exactly that for reads
  // while writes are stopped (null where a memtable cannot take snapshots).
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  const uint64_t target = snapshot != nullptr ? snapshot->GetSequenceNumber()
                                              : db_->GetLatestSequenceNumber();
  // The WAL is flushed by hand (manual_wal_flush): write the buffer, sync.
  rocksdb::Status s = db_->FlushWAL(/*sync=*/false);
  DurableMark mark{target};
  if (s.ok() && context_.marker != nullptr) {
    std::unique_ptr<rocksdb::LogFile> wal;
    if (db_->GetCurrentWalFile(&wal).ok() && wal != nullptr) {
      mark.wal_number = wal->LogNumber();
      mark.wal_bytes = wal->SizeFileBytes();
    }
  }
  // The fsync itself runs without the lock: writers append to RocksDB's
  // buffer meanwhile (SyncWAL syncs the file without touching the buffer),
  // as they did before any of this, which keeps durable pairs as fast. A
  // WAL write that fails from here until SyncWAL starts is the one case
  // left in which the sync touches a failed file; it is microseconds wide
  // against milliseconds of fsync, and costs a restart at worst.
  io.reset();
  if (s.ok() && context_.health != nullptr) {
    if (absl::Status h = context_.health->CheckWalUsable(); !h.ok()) {
      if (snapshot != nullptr) db_->ReleaseSnapshot(snapshot);
      return h;
    }
  }
  if (s.ok()) s = db_->SyncWAL();
  if (!s.ok()) {
    if (snapshot != nullptr) db_->ReleaseSnapshot(snapshot);
    if (context_.health != nullptr) {
      context_.health->OnWriteFailed(s);
      return context_.health->CheckWalUsable();
    }
    return absl::UnavailableError(absl::StrCat("storage sync: ", s.ToString()));
  }
  durable_sequence_.store(target, std::memory_order_release);
  if (context_.marker != nullptr) context_.marker->Update(mark);
  if (snapshot != nullptr) {
    std::shared_ptr<const rocksdb::Snapshot> durable(
        snapshot,
        [db = db_](const rocksdb::Snapshot* s) { db->ReleaseSnapshot(s); });
    absl::MutexLock lock(&snapshot_mu_);
    durable_snapshot_.swap(durable);
    // The previous one is released here, or by its last reader.
  }
  const uint64_t writes = target - counted_sequence_;
  counted_sequence_ = target;
  if (context_.observer != nullptr) {
    context_.observer->OnWrite(
        static_cast<int>(writes),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return absl::OkStatus();
}

}  // namespace dedup
