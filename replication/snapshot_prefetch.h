// Fetching the state a snapshot describes off the consensus thread, before
// the engine installs the snapshot: meanwhile the node goes on voting and
// timing out like any follower, and installing is then only a swap of
// directories (see RaftConsensus, which holds a leader's InstallSnapshot
// back until Prepare says the state is here).
//
// One fetch at a time, into the state's incoming directory: from the first
// source that has a checkpoint covering the index; a failed round is tried
// again by a later Prepare, at most once a second. A failed or cancelled
// fetch leaves nothing behind (the partial copy is removed) and the state
// untouched.
//
// Thread safety: Prepare, TakeFetched and Stop may be called from any thread
// (the consensus thread in practice); the fetch runs on a thread of its own.
#ifndef DEDUP_REPLICATION_SNAPSHOT_PREFETCH_H_
#define DEDUP_REPLICATION_SNAPSHOT_PREFETCH_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/replicated_store.h"

namespace dedup {

class SnapshotPrefetch {
 public:
  // Fetches into `incoming_dir` through `fetch` (which must not be null).
  SnapshotPrefetch(std::string incoming_dir, FetchCheckpointFn fetch);
  ~SnapshotPrefetch();  // Stop()

  SnapshotPrefetch(const SnapshotPrefetch&) = delete;
  SnapshotPrefetch& operator=(const SnapshotPrefetch&) = delete;

  // True when a fetched copy covering `index` is ready (TakeFetched gives
  // it). Otherwise starts fetching one from `sources` (client addresses, in
  // order) unless a fetch runs or the last one failed less than a second
  // ago, and returns false. Never blocks for a transfer.
  [[nodiscard]] bool Prepare(uint64_t index,
                             const std::vector<std::string>& sources);

  // The applied index of the fetched copy if it covers `index`: the copy in
  // the incoming directory is then the caller's to swap in. Nullopt
  // otherwise (nothing changes).
  [[nodiscard]] std::optional<uint64_t> TakeFetched(uint64_t index);

  // Cancels a running fetch and waits for its thread. Idempotent; Prepare
  // starts nothing afterwards.
  void Stop();

 private:
  void Run(uint64_t index, std::vector<std::string> sources);

  const std::string incoming_dir_;
  const FetchCheckpointFn fetch_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t fetched_index_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none ready
  absl::Time last_failure_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_SNAPSHOT_PREFETCH_H_
