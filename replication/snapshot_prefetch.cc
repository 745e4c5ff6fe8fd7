#include "replication/snapshot_prefetch.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/time/clock.h"
#include "common/log.h"

namespace dedup {
namespace {

constexpr absl::Duration kRetryDelay = absl::Seconds(1);

void RemoveAll(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace

SnapshotPrefetch::SnapshotPrefetch(std::string incoming_dir,
                                   FetchCheckpointFn fetch)
    : incoming_dir_(std::move(incoming_dir)), fetch_(std::move(fetch)) {}

SnapshotPrefetch::~SnapshotPrefetch() { Stop(); }

bool SnapshotPrefetch::Prepare(uint64_t index,
                               const std::vector<std::string>& sources) {
  absl::MutexLock lock(&mu_);
  if (fetched_index_ >= index && fetched_index_ > 0) return true;
  if (fetching_ || cancelled_.load()) return false;
  if (absl::Now() - last_failure_ < kRetryDelay) return false;
  // The previous fetch's thread has ended (or is about to: fetching_ is
  // its last write).
  if (thread_.joinable()) thread_.join();
  fetching_ = true;
  fetched_index_ = 0;
  thread_ = std::thread([this, index, sources] { Run(index, sources); });
  return false;
}

std::optional<uint64_t> SnapshotPrefetch::TakeFetched(uint64_t index) {
  absl::MutexLock lock(&mu_);
  if (fetching_ || fetched_index_ == 0 || fetched_index_ < index) {
    return std::nullopt;
  }
  return std::exchange(fetched_index_, 0);
}

void SnapshotPrefetch::Stop() {
  cancelled_.store(true);
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void SnapshotPrefetch::Run(uint64_t index, std::vector<std::string> sources) {
  for (const std::string& address : sources) {
    if (cancelled_.load()) break;
    RemoveAll(incoming_dir_);
    LogInfo("snapshot ", index, ": fetching the state from ", address,
            " (this node keeps voting meanwhile)");
    const absl::Time start = absl::Now();
    absl::StatusOr<uint64_t> fetched =
        fetch_(address, index, incoming_dir_, &cancelled_);
    if (fetched.ok()) {
      LogInfo("snapshot ", index, ": fetched the state at index ", *fetched,
              " from ", address, " in ",
              absl::FormatDuration(absl::Now() - start));
      absl::MutexLock lock(&mu_);
      fetched_index_ = *fetched;
      fetching_ = false;
      return;
    }
    LogWarning("snapshot ", index, " from ", address, ": ",
               fetched.status().message());
    RemoveAll(incoming_dir_);
  }
  absl::MutexLock lock(&mu_);
  last_failure_ = absl::Now();
  fetching_ = false;
}

}  // namespace dedup
