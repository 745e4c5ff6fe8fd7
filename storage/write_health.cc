#include "storage/write_health.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace dedup {
namespace {

// Free space is measured at most this often before writes...
constexpr int64_t kSpaceCheckEveryNs = 5'000'000;
// ...and by the watching thread at least this often.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
// A Resume() running longer than this is taken as stuck.
constexpr absl::Duration kResumeStuckAfter = absl::Seconds(10);

std::string Interval(int64_t ms) {
  return ms % 1000 == 0 ? absl::StrCat(ms / 1000, " s")
                        : absl::StrCat(ms, " ms");
}

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What RocksDB can come back from by Resume(): a full disk, a retryable I/O
// error. A fatal or unrecoverable error (an I/O error while writing the WAL,
// a damaged file) needs a restart, or worse.
bool Resumable(const rocksdb::Status& error) {
  if (error.IsNoSpace()) return true;
  if (error.IsCorruption()) return false;
  return error.severity() < rocksdb::Status::Severity::kFatalError;
}

}  // namespace

WriteHealth::WriteHealth(WriteHealthOptions options)
    : options_(std::move(options)) {}

WriteHealth::~WriteHealth() { Stop(); }

void WriteHealth::Install(const std::shared_ptr<WriteHealth>& health,
                          rocksdb::Options& options) {
  // Retryable I/O errors would otherwise be resumed by a RocksDB thread of
  // its own, and a manual Resume() answers Busy while that one is pending.
  options.max_bgerror_resume_count = 0;
  options.listeners.push_back(health);
}

void WriteHealth::Start(rocksdb::DB* db, absl::Mutex* wal_io_mu) {
  db_ = db;
  wal_io_mu_ = wal_io_mu;
  CheckSpace();  // before the first write
  thread_ = std::thread([this] {
    NameThisThread("dedup-disk");
    Loop();
  });
}

void WriteHealth::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::string WriteHealth::RocksDbErrorMessageLocked() const {
  const std::string retry = Interval(options_.retry_interval_ms);
  if (resume_started_ != absl::InfinitePast() &&
      absl::Now() - resume_started_ > kResumeStuckAfter) {
    return absl::StrCat(
        "storage cannot write: ", error_,
        "; RocksDB's recovery has not finished after ",
        absl::FormatDuration(
            absl::Trunc(absl::Now() - resume_started_, absl::Seconds(1))),
        " (RocksDB 7.8 can wait forever there for a flush it dropped after "
        "the error): restart dedupd");
  }
  if (!resumable_) {
    return absl::StrCat(
        "storage cannot write: ", error_,
        "; RocksDB cannot resume from this error while dedupd runs: fix the "
        "cause and restart dedupd (a damaged file needs the data dir "
        "restored from a backup or a replica); retrying every ",
        retry);
  }
  return absl::StrCat(
      "storage cannot write: ", error_,
      "; writes resume by themselves once the cause is gone (a full disk: "
      "once the data dir's filesystem has room; too many open files: once "
      "descriptors are free); retrying every ",
      retry);
}

absl::Status WriteHealth::CheckWalUsable() const {
  if (!rocksdb_error()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return absl::UnavailableError(RocksDbErrorMessageLocked());
}

absl::Status WriteHealth::CheckWritable() const {
  if (!write_stopped()) return absl::OkStatus();
  if (rocksdb_error()) return CheckWalUsable();
  return absl::UnavailableError(absl::StrCat(
      "storage cannot write: the filesystem of the data dir ", options_.path,
      " has ", Mib(free_bytes_.load()), " free, less than the ",
      Mib(options_.min_free_bytes),
      " kept free so that RocksDB never runs out of space; writes resume by "
      "themselves once there is room (checked every ",
      absl::FormatDuration(kPollInterval), ")"));
}

bool WriteHealth::StoppedBeforeWrite() {
  if (options_.min_free_bytes > 0 &&
      SteadyNowNs() - space_checked_ns_.load(std::memory_order_relaxed) >
          kSpaceCheckEveryNs) {
    CheckSpace();
  }
  return write_stopped();
}

void WriteHealth::CheckSpace() {
  if (options_.min_free_bytes == 0) return;
  space_checked_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
  struct statvfs fs;
  if (statvfs(options_.path.c_str(), &fs) != 0) return;  // unknown: go on
  const uint64_t free_bytes =
      static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
  free_bytes_.store(free_bytes, std::memory_order_relaxed);
  const bool low = free_bytes < options_.min_free_bytes;
  if (space_low_.exchange(low, std::memory_order_acq_rel) == low) return;
  if (low) {
    LogError("storage cannot write: the data dir's filesystem has ",
             Mib(free_bytes), " free, less than the ",
             Mib(options_.min_free_bytes),
             " kept free; writes are refused until it has room");
  } else {
    {
      absl::MutexLock lock(&mu_);
      ++resumes_;
    }
    LogInfo("storage writes resumed: the data dir's filesystem has ",
            Mib(free_bytes), " free");
  }
}

void WriteHealth::OnWriteFailed(const rocksdb::Status& status) {
  if (status.ok()) return;
  // RocksDB reported it already (OnBackgroundError runs inside the failing
  // call), with a better-classified status: keep that one.
  if (rocksdb_error()) return;
  Record(status, /*stops_writes=*/true);
}

void WriteHealth::OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                                    rocksdb::Status* bg_error) {
  if (bg_error == nullptr || bg_error->ok()) return;
  // A soft error (a compaction that found no room) leaves writes going; a
  // retryable I/O error is reported before RocksDB sets its severity (hard).
  const rocksdb::Status::Severity severity = bg_error->severity();
  const bool stops_writes =
      severity >= rocksdb::Status::Severity::kHardError ||
      (severity == rocksdb::Status::Severity::kNoError &&
       reason != rocksdb::BackgroundErrorReason::kCompaction);
  Record(*bg_error, stops_writes);
}

void WriteHealth::OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason,
                                       rocksdb::Status, bool* auto_recovery) {
  // Loop resumes, on its own schedule.
  if (auto_recovery != nullptr) *auto_recovery = false;
}

void WriteHealth::Record(const rocksdb::Status& error, bool stops_writes) {
  bool newly_stopped = false;
  {
    absl::MutexLock lock(&mu_);
    ++errors_;
    ++generation_;
    needs_resume_ = true;
    if (stops_writes) {
      // A later error (one met by a failed Resume) says best what is wrong
      // now; but once an error needs a restart, it stays the one reported.
      if (resumable_ || !rocksdb_error_.load()) {
        error_ = error.ToString();
        resumable_ = Resumable(error);
      }
      newly_stopped = !rocksdb_error_.exchange(true, std::memory_order_acq_rel);
      if (newly_stopped) stopped_since_ = absl::Now();
    }
  }
  if (newly_stopped) {
    LogError("storage cannot write: ", error.ToString(),
             "; writes are refused until RocksDB resumes");
  }
}

void WriteHealth::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), kPollInterval)) {
        return;
      }
    }
    CheckSpace();
    TryResume();
  }
}

void WriteHealth::TryResume() {
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    if (!needs_resume_) return;
    // Not at once, nor while the disk is still too full to flush.
    if (absl::Now() - last_resume_ <
            absl::Milliseconds(options_.retry_interval_ms) ||
        space_low_.load()) {
      return;
    }
    generation = generation_;
    resume_started_ = absl::Now();
  }
  rocksdb::Status resumed;
  if (wal_io_mu_ != nullptr) {
    absl::ReaderMutexLock io(wal_io_mu_);
    resumed = db_->Resume();
  } else {
    resumed = db_->Resume();
  }
  absl::Duration stopped_for;
  bool came_back = false;
  {
    absl::MutexLock lock(&mu_);
    resume_started_ = absl::InfinitePast();
    last_resume_ = absl::Now();
    // A failed Resume reported its error meanwhile; a new error means the
    // success is stale.
    if (!resumed.ok() || generation_ != generation) return;
    needs_resume_ = false;
    if (rocksdb_error_.exchange(false, std::memory_order_acq_rel)) {
      came_back = true;
      ++resumes_;
      error_.clear();
      resumable_ = true;
      stopped_for = absl::Now() - stopped_since_;
    }
  }
  if (came_back) {
    LogInfo(
        "storage writes resumed after ",
        absl::FormatDuration(absl::Trunc(stopped_for, absl::Milliseconds(1))));
  }
}

void WriteHealth::AddTo(StoreStats& stats) const {
  stats.write_stopped = write_stopped();
  stats.data_dir_free_bytes = free_bytes_.load();
  {
    absl::MutexLock lock(&mu_);
    stats.background_errors = errors_;
    stats.write_resumes = resumes_;
  }
  if (stats.write_stopped) {
    stats.write_error = std::string(CheckWritable().message());
  }
}

}  // namespace dedup
