// What a group member counts about its replication (ClusterStatus.counters,
// exported as metrics): entries and operations proposed, outcomes reported
// unknown, snapshots taken, installed and sent, and spells without a leader.
#ifndef DEDUP_REPLICATION_REPLICATION_TALLY_H_
#define DEDUP_REPLICATION_REPLICATION_TALLY_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "replication/replicated_store.h"
#include "storage/clock.h"

namespace dedup {

// Thread-safe, except ObserveLeader (the consensus thread's, see there).
class ReplicationTally {
 public:
  // `clock` is not owned and must outlive the tally.
  explicit ReplicationTally(const Clock* clock) : clock_(clock) {}

  void EntryProposed(size_t operations);
  void UnknownOutcomes(size_t n);
  void SnapshotTaken();
  void SnapshotInstalled();
  void SnapshotSent();

  // Times each spell without a known leader (`leader_id` 0), counted when a
  // leader is known again. Called from one thread only (the consensus
  // thread's status ticks).
  void ObserveLeader(uint64_t leader_id);

  [[nodiscard]] ReplicationCounters Read() const;

 private:
  const Clock* const clock_;
  int64_t leaderless_since_ms_ = 0;  // ObserveLeader's thread only
  mutable absl::Mutex mu_;
  ReplicationCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_REPLICATION_TALLY_H_
