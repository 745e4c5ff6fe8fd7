#include "storage/wal_syncer.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup {

WalSyncer::WalSyncer(rocksdb::DB* db, StoreObserver* observer)
    : db_(db),
      observer_(observer),
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
}

void WalSyncer::Run() {
  for (;;) {
    std::vector<Release> releases;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WalSyncer::HasWorkLocked));
      if (pending_.empty()) {
        stopped_ = true;  // stopping_, and nothing left to release
        return;
      }
      releases.swap(pending_);
    }
    // Everything pending was visible before this sync starts, so it covers
    // them all; whatever arrives meanwhile waits for the next one.
    const absl::Status synced = SyncNow();
    for (Release& release : releases) std::move(release)(synced);
  }
}

bool WalSyncer::HasWorkLocked() const { return !pending_.empty() || stopping_; }

absl::Status WalSyncer::SyncNow() {
  absl::MutexLock lock(&sync_mu_);
  const uint64_t target = db_->GetLatestSequenceNumber();
  if (target <= durable_sequence_.load(std::memory_order_relaxed)) {
    return absl::OkStatus();
  }
  const auto start = std::chrono::steady_clock::now();
  // The WAL is flushed by hand (manual_wal_flush): write the buffer, sync.
  const rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("storage sync: ", s.ToString()));
  }
  durable_sequence_.store(target, std::memory_order_release);
  const uint64_t writes = target - counted_sequence_;
  counted_sequence_ = target;
  if (observer_ != nullptr) {
    observer_->OnWrite(
        static_cast<int>(writes),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return absl::OkStatus();
}

}  // namespace dedup
