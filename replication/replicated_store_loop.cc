// The consensus thread's queue: operations submitted, batched into entries,
// proposed, and failed or re-queued when leadership moves.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "replication/replicated_store_impl.h"

namespace dedup::replicated_store_internal {

void ReplicatedStoreImpl::Submit(PendingOp p) {
  if (absl::Status s = CheckServing(); !s.ok()) {
    std::move(p).Fail(s);
    return;
  }
  if (Holding()) transfer_held_.fetch_add(1, std::memory_order_relaxed);
  // Reads still go through the log, but their entries are tiny.
  if (!std::holds_alternative<LogGet>(p.op) && space_ != nullptr &&
      space_->StoppedBeforeWrite()) {
    HandOffLeadership();
    std::move(p).Fail(absl::UnavailableError(absl::StrCat(
        space_->CheckWritable().message(),
        "; meanwhile this node hands leadership to another member: retry "
        "(the new leader is named once elected)")));
    return;
  }
  bool post = false;
  bool full = false;
  {
    absl::MutexLock lock(&mu_);
    full = queue_.size() >= options_.max_queued;
    if (!full) {
      queue_.push_back(std::move(p));
      if (!drain_posted_) post = drain_posted_ = true;
    }
  }
  if (full) {
    std::move(p).Fail(absl::ResourceExhaustedError(
        absl::StrCat("replication overloaded: ", options_.max_queued,
                     " operations queued; retry with backoff")));
    return;
  }
  if (post) consensus_->Post([this] { Drain(); });
}

void ReplicatedStoreImpl::HandOffLeadership() {
  const int64_t now = options_.clock->NowMillis();
  int64_t last = last_hand_off_ms_.load();
  if (now - last < kHandOffIntervalMs ||
      !last_hand_off_ms_.compare_exchange_strong(last, now)) {
    return;
  }
  LogWarning(space_->CheckWritable().message(),
             "; handing leadership to another member");
  TransferLeadership(0, [](absl::Status s) {
    if (!s.ok()) LogWarning("leadership not handed off: ", s.message());
  });
}

void ReplicatedStoreImpl::Drain() {
  std::deque<PendingOp> refused;
  absl::Status refusal;
  for (;;) {
    std::vector<PendingOp> ops;
    {
      absl::MutexLock lock(&mu_);
      drain_posted_ = false;
      if (queue_.empty()) break;
      // MaybeReleaseHold drains again.
      if (Holding()) break;
      if (!is_leader_.load()) {
        refused.swap(queue_);
        refusal = members_.NotLeader(leader_id_.load());
        break;
      }
      if (inflight_entries_ >= options_.max_inflight_entries) break;
      if (inflight_ops_ >= options_.max_inflight_ops) break;
      // Room under the bound, but never less than an even share of it: a
      // sliver of room would otherwise make a sliver of an entry.
      const size_t room = std::max(
          options_.max_inflight_ops - inflight_ops_,
          options_.max_inflight_ops /
              static_cast<size_t>(std::max(1, options_.max_inflight_entries)));
      const size_t limit =
          std::max<size_t>(1, std::min(options_.max_entry_ops, room));
      size_t bytes = 0;
      while (!queue_.empty() && ops.size() < limit &&
             (ops.empty() ||
              bytes + queue_.front().bytes() <= options_.max_entry_bytes)) {
        bytes += queue_.front().bytes();
        ops.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    Propose(std::move(ops));
  }
  for (PendingOp& p : refused) std::move(p).Fail(refusal);
}

void ReplicatedStoreImpl::Propose(std::vector<PendingOp> ops) {
  LogEntry entry;
  entry.proposer = options_.node_id;
  entry.incarnation = incarnation_;
  entry.sequence = ++sequence_;
  entry.now_ms = std::max(options_.clock->NowMillis(), state_->now_ms());
  entry.ops.reserve(ops.size());
  for (const PendingOp& p : ops) entry.ops.push_back(p.op);
  const uint64_t sequence = entry.sequence;
  absl::Status proposed = consensus_->Propose(
      EncodeLogEntry(entry), [this, sequence](absl::Status status) {
        OnProposalDone(sequence, status);
      });
  if (!proposed.ok()) {
    const absl::Status error = absl::IsFailedPrecondition(proposed)
                                   ? members_.NotLeader(leader_id_.load())
                                   : absl::UnavailableError(proposed.message());
    for (PendingOp& p : ops) std::move(p).Fail(error);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    ++inflight_entries_;
    inflight_ops_ += ops.size();
  }
  inflight_sizes_[sequence] = ops.size();
  tally_.EntryProposed(ops.size());
  proposed_.emplace(sequence, std::move(ops));
}

void ReplicatedStoreImpl::OnProposalDone(uint64_t sequence,
                                         const absl::Status& status) {
  size_t ops = 0;
  if (auto sized = inflight_sizes_.find(sequence);
      sized != inflight_sizes_.end()) {
    ops = sized->second;
    inflight_sizes_.erase(sized);
  }
  {
    absl::MutexLock lock(&mu_);
    --inflight_entries_;
    inflight_ops_ -= std::min(ops, inflight_ops_);
  }
  auto it = proposed_.find(sequence);
  if (it != proposed_.end() && !status.ok() && KeepOrphaned(sequence)) {
    // Answered by this node's apply of the entry, or ExpireOrphans.
  } else if (it != proposed_.end()) {
    // Not answered by Apply: the entry did not apply here (yet).
    const absl::Status error =
        status.ok() ? absl::InternalError("entry applied without answers")
                    : UnknownOutcome(status.message());
    if (!status.ok()) tally_.UnknownOutcomes(it->second.size());
    for (PendingOp& p : it->second) std::move(p).Fail(error);
    proposed_.erase(it);
  }
  // Not Drain() here: this runs inside libraft's apply callback, which
  // may be failing every pending request of a leader stepping down;
  // proposing from within it crashed libraft 0.15 (SIGSEGV in
  // raft_apply). The posted Drain runs once the callback has returned.
  consensus_->Post([this] { Drain(); });
}

void ReplicatedStoreImpl::Requeue(PendingOp p) {
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(p));
    if (drain_posted_) return;
    drain_posted_ = true;
  }
  consensus_->Post([this] { Drain(); });
}

void ReplicatedStoreImpl::FailQueued(const absl::Status& status) {
  std::deque<PendingOp> queued;
  {
    absl::MutexLock lock(&mu_);
    queued.swap(queue_);
  }
  for (PendingOp& p : queued) std::move(p).Fail(status);
}

}  // namespace dedup::replicated_store_internal
