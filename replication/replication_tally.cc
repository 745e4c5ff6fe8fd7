#include "replication/replication_tally.h"

namespace dedup {

void ReplicationTally::EntryProposed(size_t operations) {
  absl::MutexLock lock(&mu_);
  ++counters_.entries_proposed;
  counters_.operations_proposed += operations;
}

void ReplicationTally::UnknownOutcomes(size_t n) {
  absl::MutexLock lock(&mu_);
  counters_.unknown_outcomes += n;
}

void ReplicationTally::SnapshotTaken() {
  absl::MutexLock lock(&mu_);
  ++counters_.snapshots_taken;
}

void ReplicationTally::SnapshotInstalled() {
  absl::MutexLock lock(&mu_);
  ++counters_.snapshots_installed;
}

void ReplicationTally::SnapshotSent() {
  absl::MutexLock lock(&mu_);
  ++counters_.snapshots_sent;
}

void ReplicationTally::ObserveLeader(uint64_t leader_id) {
  const int64_t now = clock_->NowMillis();
  if (leader_id == 0) {
    if (leaderless_since_ms_ == 0) leaderless_since_ms_ = now;
    return;
  }
  if (leaderless_since_ms_ == 0) return;
  const double seconds = (now - leaderless_since_ms_) / 1000.0;
  leaderless_since_ms_ = 0;
  absl::MutexLock lock(&mu_);
  counters_.ObserveLeaderless(seconds);
}

ReplicationCounters ReplicationTally::Read() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace dedup
