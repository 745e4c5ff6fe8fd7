// The StateMachine side of ReplicatedStore: entries applied and answered,
// snapshots taken and restored, and the consensus thread's ticks.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "replication/replicated_store_impl.h"

namespace dedup::replicated_store_internal {
namespace {

// The result budgets of an entry's callers (PendingOp::result_budget), as
// its apply on the proposer consults them: a DUPLICATE past its batch's
// budget is answered "ask again" without its result ever being copied.
class BudgetGate : public ResultGate {
 public:
  explicit BudgetGate(const std::vector<PendingOp>& ops) : ops_(ops) {}

  absl::Status Admit(size_t i, size_t bytes) override {
    ResultBudget* budget = ops_[i].result_budget;
    if (budget == nullptr || budget->Take(static_cast<int64_t>(bytes))) {
      return absl::OkStatus();
    }
    return ResultBudgetExceeded(*budget);
  }

 private:
  const std::vector<PendingOp>& ops_;
};

}  // namespace

absl::Status ReplicatedStoreImpl::Apply(uint64_t index,
                                        absl::string_view bytes) {
  // A replay after a restart: skipped unread (libraft 0.15 was seen to
  // hand a restarted ex-leader an entry it already had in freed memory).
  if (index <= state_->applied_index()) return absl::OkStatus();
  absl::StatusOr<LogEntry> entry = DecodeLogEntry(bytes);
  if (!entry.ok()) return entry.status();
  // Only the proposer, whose callers wait, builds answers: every other
  // replica (and this one for another node's entry) applies the state
  // changes alone, so reads cost no replica anything it will not answer.
  auto mine = proposed_.end();
  if (entry->proposer == options_.node_id &&
      entry->incarnation == incarnation_) {
    mine = proposed_.find(entry->sequence);
  }
  std::optional<BudgetGate> gate;
  if (mine != proposed_.end()) gate.emplace(mine->second);
  absl::StatusOr<AppliedEntry> applied =
      state_->Apply(index, *entry, gate.has_value() ? &*gate : nullptr);
  if (!applied.ok()) return applied.status();
  if (applied->skipped) return absl::OkStatus();
  if (mine != proposed_.end()) {
    if (orphaned_.erase(mine->first) > 0) {
      orphans_answered_.fetch_add(mine->second.size(),
                                  std::memory_order_relaxed);
    }
    std::vector<PendingOp> ops = std::move(mine->second);
    proposed_.erase(mine);
    for (size_t i = 0; i < ops.size(); ++i) {
      Answer(std::move(ops[i]), std::move(applied->answers[i]),
             applied->now_ms);
    }
  }
  for (const std::string& skey : applied->settled_keys) WakeKey(skey);
  if (applied->members_changed) ReloadMembers();
  if (applied->shard_map_changed && options_.shard_map_changed) {
    options_.shard_map_changed();
  }
  return absl::OkStatus();
}

void ReplicatedStoreImpl::Answer(PendingOp p, OpAnswer answer, int64_t now_ms) {
  if (std::holds_alternative<LogBegin>(p.op)) {
    auto* d = std::get_if<BeginDecision>(&answer);
    if (d != nullptr && d->status == BeginStatus::kInUse && !draining_.load() &&
        now_ms < p.wait_deadline_ms) {
      parked_.Park(std::move(p), std::move(*d));
      return;
    }
  }
  std::move(p).Deliver(std::move(answer));
}

absl::StatusOr<std::string> ReplicatedStoreImpl::Snapshot() {
  absl::StatusOr<uint64_t> durable = state_->SyncWal();
  if (!durable.ok()) return durable.status();
  tally_.SnapshotTaken();
  return EncodeSnapshotDescriptor({*durable, options_.node_id});
}

bool ReplicatedStoreImpl::PrepareSnapshot(absl::string_view text) {
  absl::StatusOr<SnapshotDescriptor> descriptor =
      DecodeSnapshotDescriptor(text);
  // Restore reports what is wrong with it.
  if (!descriptor.ok() || prefetch_ == nullptr) return true;
  if (state_->applied_index() >= descriptor->index) return true;
  return prefetch_->Prepare(
      descriptor->index,
      members_.SnapshotSources(descriptor->taker, options_.node_id));
}

absl::Status ReplicatedStoreImpl::Restore(absl::string_view text) {
  absl::StatusOr<SnapshotDescriptor> descriptor =
      DecodeSnapshotDescriptor(text);
  if (!descriptor.ok()) return descriptor.status();
  const uint64_t before = state_->applied_index();
  if (before >= descriptor->index) return absl::OkStatus();
  std::optional<uint64_t> fetched;
  if (prefetch_ != nullptr) fetched = prefetch_->TakeFetched(descriptor->index);
  if (fetched.has_value()) {
    InstallFetched(state_.get(), *descriptor, *fetched);
  } else if (running_.load() && prefetch_ != nullptr) {
    // The engine installs only what PrepareSnapshot said was here: never
    // a transfer on the consensus thread, which must keep voting.
    return absl::UnavailableError(
        absl::StrCat("the state of the snapshot at index ", descriptor->index,
                     " is not fetched yet"));
  } else {
    // A restart behind its own snapshot (stopped between storing it and
    // swapping the state in): nothing runs yet, fetch it here. (Without
    // a way to fetch, this says so at once.)
    absl::Status s = InstallSnapshot(
        state_.get(), *descriptor,
        members_.SnapshotSources(descriptor->taker, options_.node_id),
        options_.fetch_checkpoint, kRestartFetchRounds, absl::Seconds(1));
    if (!s.ok()) return s;
  }
  if (state_->applied_index() != before) {
    ReloadMembers();
    tally_.SnapshotInstalled();
  }
  return absl::OkStatus();
}

void ReplicatedStoreImpl::ReloadMembers() {
  absl::StatusOr<std::map<uint64_t, std::string>> recorded = state_->Members();
  // A closed state records nothing more: the configured peers stay.
  members_.Reload(recorded.ok() ? *recorded
                                : std::map<uint64_t, std::string>());
}

// Info, not debug: a leader change fails or holds calls, and operators
// reading why want the time, the group and the term in the process log.
void ReplicatedStoreImpl::LogLeaderChange(uint64_t last_leader,
                                          const ConsensusStatus& status) const {
  const std::string group = absl::StrCat("group ", options_.group_id, ": ");
  if (status.leader_id == 0) {
    LogInfo(group, "leader node ", last_leader, " no longer known (term ",
            status.term, ", this node ", RoleName(status.role),
            "): an election or a transfer runs");
  } else if (status.leader_id == options_.node_id) {
    LogInfo(group, "this node leads (term ", status.term, ")");
  } else {
    LogInfo(group, "leader is node ", status.leader_id, " (term ", status.term,
            ")");
  }
}

void ReplicatedStoreImpl::Tick(const ConsensusStatus& status) {
  tally_.ObserveLeader(status.leader_id);
  const bool leader = status.role == Role::kLeader;
  // Only this thread writes leader_id_.
  const uint64_t last_leader = leader_id_.load();
  // An election started (a transfer starts one): hold calls until its
  // winner is known rather than refuse them naming nobody. The hold starts
  // before leader_id_ says "none": CheckServing, on other threads, refuses
  // naming nobody whenever it sees no leader and no hold.
  if (last_leader != 0 && status.leader_id == 0) StartHold();
  leader_id_.store(status.leader_id);
  const bool was_leader = is_leader_.exchange(leader);
  if (was_leader && !leader) {
    AnswerAllWaiters();
    // Held for a transfer: answered once the new leader is known.
    if (!Holding()) FailQueued(members_.NotLeader(status.leader_id));
  }
  MaybeReleaseHold(status);
  // Last: the state above is what other threads read meanwhile.
  if (last_leader != status.leader_id) LogLeaderChange(last_leader, status);
  if (!orphaned_.empty()) ExpireOrphans(options_.clock->NowMillis());
  if (leader && !parked_.empty()) {
    for (PendingOp& p : parked_.TakeDue(options_.clock->NowMillis())) {
      Requeue(std::move(p));
    }
  }
}

}  // namespace dedup::replicated_store_internal
