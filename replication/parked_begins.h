// Begins parked on the leader by their wait_ms while their key is in use:
// woken when the key settles or when their wait or the observed lease runs
// out (they are then proposed again), or answered at once with their last
// decision when the node stops leading or drains.
//
// Thread safety: one thread (the consensus thread) calls everything but
// size(), which any thread may read.
#ifndef DEDUP_REPLICATION_PARKED_BEGINS_H_
#define DEDUP_REPLICATION_PARKED_BEGINS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "replication/pending_op.h"

namespace dedup {

class ParkedBegins {
 public:
  // Parks Begin `p`, whose last decision was IN_USE (`last`).
  void Park(PendingOp p, BeginDecision last);
  // The Begins parked on `skey` (its owner finished), in arrival order.
  [[nodiscard]] std::vector<PendingOp> TakeKey(const std::string& skey);
  // The Begins whose wait or observed lease ran out by `now_ms`.
  [[nodiscard]] std::vector<PendingOp> TakeDue(int64_t now_ms);
  // Answers every parked Begin with its last decision (IN_USE, with
  // retry_after_ms from `now_ms`).
  void AnswerAll(int64_t now_ms);

  bool empty() const { return waiters_.empty(); }
  uint64_t size() const { return count_.load(); }

 private:
  // A parked Begin with the decision it would get now.
  struct Waiter {
    PendingOp op;
    BeginDecision last;
    int64_t next_check_ms = 0;
  };

  absl::flat_hash_map<std::string, std::vector<Waiter>> waiters_;
  std::atomic<uint64_t> count_{0};
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PARKED_BEGINS_H_
