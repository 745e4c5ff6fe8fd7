// Leadership transfers on the consensus thread: operations held while one
// is in flight, then proposed or refused naming the new leader, and the
// proposals that lost their leader kept for this node's apply of their
// entry (replicated_store.h).
#include <utility>
#include <vector>

#include "replication/replicated_store_impl.h"

namespace dedup::replicated_store_internal {

void ReplicatedStoreImpl::StartHold() {
  if (hold_until_ms_.load() != 0) return;
  hold_until_ms_.store(options_.clock->NowMillis() +
                       options_.max_transfer_hold_ms);
}

void ReplicatedStoreImpl::BeginTransfer() {
  transfer_in_flight_ = true;
  hold_until_ms_.store(options_.clock->NowMillis() +
                       options_.max_transfer_hold_ms);
}

void ReplicatedStoreImpl::EndTransfer() {
  transfer_in_flight_ = false;
  // The engine refreshed its status (and Tick ran) before ending the
  // transfer: it names the leader, when known.
  MaybeReleaseHold(consensus_->Status());
}

void ReplicatedStoreImpl::MaybeReleaseHold(const ConsensusStatus& status) {
  const int64_t until = hold_until_ms_.load();
  if (until == 0) return;
  const bool expired = options_.clock->NowMillis() >= until;
  const bool settled = !transfer_in_flight_ &&
                       (status.role == Role::kLeader || status.leader_id != 0);
  if (!expired && !settled) return;
  hold_until_ms_.store(0);
  // Posted, never run here: this may be inside a libraft callback, where
  // proposing is not safe (see OnProposalDone).
  consensus_->Post([this] { Drain(); });
}

bool ReplicatedStoreImpl::KeepOrphaned(uint64_t sequence) {
  if (!Holding()) return false;
  orphaned_[sequence] =
      options_.clock->NowMillis() + options_.max_transfer_hold_ms;
  return true;
}

void ReplicatedStoreImpl::ExpireOrphans(int64_t now_ms) {
  for (auto it = orphaned_.begin(); it != orphaned_.end();) {
    auto proposed = proposed_.find(it->first);
    if (proposed == proposed_.end()) {
      it = orphaned_.erase(it);  // answered by its apply
      continue;
    }
    if (now_ms < it->second) {
      ++it;
      continue;
    }
    std::vector<PendingOp> ops = std::move(proposed->second);
    proposed_.erase(proposed);
    it = orphaned_.erase(it);
    tally_.UnknownOutcomes(ops.size());
    const absl::Status error = UnknownOutcome(
        "leadership moved to another node after it was proposed, and this "
        "node has not applied it since");
    for (PendingOp& p : ops) std::move(p).Fail(error);
  }
}

}  // namespace dedup::replicated_store_internal
