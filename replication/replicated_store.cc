#include "replication/replicated_store.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "replication/member_directory.h"
#include "replication/parked_begins.h"
#include "replication/pending_op.h"
#include "replication/replication_tally.h"
#include "replication/snapshot_prefetch.h"
#include "replication/snapshot_transfer.h"
#include "storage/storage_key.h"
#include "storage/write_health.h"

namespace dedup {
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

class ReplicatedStoreImpl : public ReplicatedStore, private StateMachine {
 public:
  ReplicatedStoreImpl(ReplicatedStoreOptions options,
                      std::unique_ptr<ReplicatedState> state)
      : options_(std::move(options)),
        state_(std::move(state)),
        incarnation_(std::random_device()() ^
                     (static_cast<uint64_t>(std::random_device()()) << 32)),
        members_(options_.nodes),
        prefetch_(options_.fetch_checkpoint
                      ? std::make_unique<SnapshotPrefetch>(
                            state_->IncomingDir(), options_.fetch_checkpoint)
                      : nullptr) {
    ReloadMembers();
    if (options_.min_free_disk_bytes > 0) {
      // Only its free-space watch: RocksDB errors here end the process
      // (a replica must never skip an entry), so nothing needs resuming.
      WriteHealthOptions space;
      space.path = std::filesystem::path(options_.log_dir).parent_path();
      space.min_free_bytes = options_.min_free_disk_bytes;
      space_ = std::make_unique<WriteHealth>(std::move(space));
    }
  }

  ~ReplicatedStoreImpl() override { (void)Close(); }

  absl::Status Start() {
    if (space_ != nullptr) space_->Start(nullptr, nullptr);
    if (!options_.consensus) {
      return absl::InvalidArgumentError("no consensus engine to start");
    }
    absl::StatusOr<std::unique_ptr<Consensus>> consensus =
        options_.consensus(this);
    if (!consensus.ok()) return consensus.status();
    consensus_ = *std::move(consensus);
    running_.store(true);
    return absl::OkStatus();
  }

  // --- Store -------------------------------------------------------------

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override {
    PendingOp p =
        PendingOp::Of(LogBegin{EncodeStorageKey(ns, key), std::move(params)},
                      std::move(done));
    p.wait_deadline_ms =
        wait_ms > 0 ? options_.clock->NowMillis() + wait_ms : 0;
    Submit(std::move(p));
  }

  void Complete(std::string ns, std::string key, CompleteParams params,
                StoreCallback<FencedDecision> done) override {
    Submit(
        PendingOp::Of(LogComplete{EncodeStorageKey(ns, key), std::move(params)},
                      std::move(done)));
  }

  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override {
    Submit(PendingOp::Of(LogRelease{EncodeStorageKey(ns, key), fence},
                         std::move(done)));
  }

  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override {
    Submit(PendingOp::Of(LogRenew{EncodeStorageKey(ns, key), fence, lease_ms},
                         std::move(done)));
  }

  void Checkpoint(std::string ns, std::string key, CheckpointParams params,
                  StoreCallback<FencedDecision> done) override {
    Submit(PendingOp::Of(
        LogCheckpoint{EncodeStorageKey(ns, key), std::move(params)},
        std::move(done)));
  }

  void BeginMany(std::vector<BeginCall> calls) override {
    for (BeginCall& call : calls) {
      PendingOp p = PendingOp::Of(
          LogBegin{EncodeStorageKey(call.ns, call.key), std::move(call.params)},
          std::move(call.done));
      p.result_budget = call.result_budget;
      Submit(std::move(p));
    }
  }

  void CompleteMany(std::vector<CompleteCall> calls) override {
    for (CompleteCall& call : calls) {
      Complete(std::move(call.ns), std::move(call.key), std::move(call.params),
               std::move(call.done));
    }
  }

  void Get(std::string ns, std::string key,
           StoreCallback<std::optional<Record>> done) override {
    Submit(PendingOp::Of(LogGet{EncodeStorageKey(ns, key)}, std::move(done)));
  }

  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override {
    Submit(
        PendingOp::Of(LogForget{EncodeStorageKey(ns, key)}, std::move(done)));
  }

  absl::Status CheckServing() const override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    if (!is_leader_.load()) return members_.NotLeader(leader_id_.load());
    return absl::OkStatus();
  }

  void DrainWaiters() override {
    draining_.store(true);
    if (consensus_ != nullptr) {
      consensus_->Post([this] { AnswerAllWaiters(); });
    }
  }

  absl::Status Close() override {
    if (closed_.exchange(true)) return absl::OkStatus();
    draining_.store(true);
    if (space_ != nullptr) space_->Stop();
    if (consensus_ != nullptr) {
      consensus_->Post([this] {
        AnswerAllWaiters();
        FailQueued(absl::UnavailableError("store is closed"));
      });
      consensus_->Stop();
    }
    // After the engine: nothing asks for a fetch any more.
    if (prefetch_ != nullptr) prefetch_->Stop();
    // The consensus thread is gone: what it left unanswered is answered
    // here. A proposed entry may still commit elsewhere.
    for (auto& [sequence, ops] : proposed_) {
      tally_.UnknownOutcomes(ops.size());
      for (PendingOp& p : ops) {
        std::move(p).Fail(UnknownOutcome("the node stopped"));
      }
    }
    proposed_.clear();
    AnswerAllWaiters();
    FailQueued(absl::UnavailableError("store is closed"));
    return state_->Close();
  }

  absl::Status CompactAll() override { return state_->CompactAll(); }

  StoreStats Stats() override {
    StoreStats stats = state_->Stats();
    stats.waiting_begins = parked_.size();
    if (space_ != nullptr) space_->AddTo(stats);
    return stats;
  }

  absl::StatusOr<uint64_t> CountStoredRecords() override {
    return state_->CountStoredRecords();
  }

  StoredBytes StoredBytesByNamespace() const override {
    return state_->StoredBytesByNamespace();
  }

  // --- ReplicatedStore ---------------------------------------------------

  ClusterStatus GetClusterStatus() const override {
    ClusterStatus status;
    if (consensus_ != nullptr) status.consensus = consensus_->Status();
    status.nodes = members_.Nodes();
    status.state_applied_index = state_->applied_index();
    status.replicated_now_ms = state_->now_ms();
    status.last_fence = state_->last_fence();
    status.result_bytes_answered = state_->result_bytes_answered();
    status.counters = tally_.Read();
    return status;
  }

  absl::Status CheckDiskSpace() const override {
    return space_ == nullptr ? absl::OkStatus() : space_->CheckWritable();
  }

  absl::StatusOr<StateDigest> Digest() override {
    return state_->ComputeDigest();
  }

  absl::StatusOr<OutgoingCheckpoint> CreateOutgoingCheckpoint() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    absl::StatusOr<OutgoingCheckpoint> out =
        MakeOutgoingCheckpoint(state_.get(), OutgoingRoot(),
                               absl::StrCat(outgoing_sequence_.fetch_add(1)));
    if (out.ok()) tally_.SnapshotSent();
    return out;
  }

  void AddMember(ClusterNode node, Done done) override {
    auto add = [this, node](Done done) {
      OnLoop(std::move(done), [this, node](Done done) {
        return consensus_->AddMember(node.id, node.raft_address,
                                     std::move(done));
      });
    };
    if (node.client_address.empty()) {
      add(std::move(done));
      return;
    }
    // Every member learns the newcomer's client address first (through the
    // log), so any of them can name it once it leads.
    StoreCallback<bool> recorded =
        [add, done = std::make_shared<Done>(std::move(done))](
            absl::StatusOr<bool> recorded) mutable {
          if (!recorded.ok()) {
            std::move (*done)(recorded.status());
          } else {
            add(std::move(*done));
          }
        };
    Submit(PendingOp::Of(LogSetMember{node.id, node.client_address},
                         std::move(recorded)));
  }

  void RemoveMember(uint64_t id, Done done) override {
    OnLoop(std::move(done), [this, id](Done done) {
      return consensus_->RemoveMember(id, std::move(done));
    });
  }

  void TransferLeadership(uint64_t id, Done done) override {
    OnLoop(std::move(done), [this, id](Done done) {
      return consensus_->TransferLeadership(id, std::move(done));
    });
  }

 private:
  // Runs `start` on the consensus thread; if it fails at once, `done`
  // hears it.
  template <typename Start>
  void OnLoop(Done done, Start start) {
    if (consensus_ == nullptr || closed_.load()) {
      std::move(done)(absl::UnavailableError("store is closed"));
      return;
    }
    auto shared = std::make_shared<Done>(std::move(done));
    consensus_->Post([shared, start = std::move(start)]() mutable {
      auto once = std::make_shared<bool>(false);
      absl::Status s = start([shared, once](absl::Status status) {
        *once = true;
        std::move (*shared)(std::move(status));
      });
      if (!s.ok() && !*once) std::move (*shared)(std::move(s));
    });
  }

  void Submit(PendingOp p) {
    if (absl::Status s = CheckServing(); !s.ok()) {
      std::move(p).Fail(s);
      return;
    }
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

  // A leader short of disk space asks libraft to transfer leadership to the
  // most up-to-date voter, at most every kHandOffIntervalMs. (A member that
  // is short too hands it on in turn; writes wait meanwhile either way.)
  void HandOffLeadership() {
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

  // Consensus thread: proposes what is queued, in entries.
  void Drain() {
    std::deque<PendingOp> refused;
    absl::Status refusal;
    for (;;) {
      std::vector<PendingOp> ops;
      {
        absl::MutexLock lock(&mu_);
        drain_posted_ = false;
        if (queue_.empty()) break;
        if (!is_leader_.load()) {
          refused.swap(queue_);
          refusal = members_.NotLeader(leader_id_.load());
          break;
        }
        if (inflight_entries_ >= options_.max_inflight_entries) break;
        size_t bytes = 0;
        while (!queue_.empty() && ops.size() < options_.max_entry_ops &&
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

  void Propose(std::vector<PendingOp> ops) {
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
      const absl::Status error =
          absl::IsFailedPrecondition(proposed)
              ? members_.NotLeader(leader_id_.load())
              : absl::UnavailableError(proposed.message());
      for (PendingOp& p : ops) std::move(p).Fail(error);
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      ++inflight_entries_;
    }
    tally_.EntryProposed(ops.size());
    proposed_.emplace(sequence, std::move(ops));
  }

  void OnProposalDone(uint64_t sequence, const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      --inflight_entries_;
    }
    auto it = proposed_.find(sequence);
    if (it != proposed_.end()) {
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

  // --- StateMachine (consensus thread) ----------------------------------

  absl::Status Apply(uint64_t index, absl::string_view bytes) override {
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
      std::vector<PendingOp> ops = std::move(mine->second);
      proposed_.erase(mine);
      for (size_t i = 0; i < ops.size(); ++i) {
        Answer(std::move(ops[i]), std::move(applied->answers[i]),
               applied->now_ms);
      }
    }
    for (const std::string& skey : applied->settled_keys) WakeKey(skey);
    if (applied->members_changed) ReloadMembers();
    return absl::OkStatus();
  }

  void Answer(PendingOp p, OpAnswer answer, int64_t now_ms) {
    if (std::holds_alternative<LogBegin>(p.op)) {
      auto* d = std::get_if<BeginDecision>(&answer);
      if (d != nullptr && d->status == BeginStatus::kInUse &&
          !draining_.load() && now_ms < p.wait_deadline_ms) {
        parked_.Park(std::move(p), std::move(*d));
        return;
      }
    }
    std::move(p).Deliver(std::move(answer));
  }

  // Proposes again the Begins parked on `skey` (their owner finished).
  void WakeKey(const std::string& skey) {
    for (PendingOp& p : parked_.TakeKey(skey)) Requeue(std::move(p));
  }

  void Requeue(PendingOp p) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(p));
      if (drain_posted_) return;
      drain_posted_ = true;
    }
    consensus_->Post([this] { Drain(); });
  }

  void AnswerAllWaiters() { parked_.AnswerAll(options_.clock->NowMillis()); }

  void FailQueued(const absl::Status& status) {
    std::deque<PendingOp> queued;
    {
      absl::MutexLock lock(&mu_);
      queued.swap(queue_);
    }
    for (PendingOp& p : queued) std::move(p).Fail(status);
  }

  absl::StatusOr<std::string> Snapshot() override {
    absl::StatusOr<uint64_t> durable = state_->SyncWal();
    if (!durable.ok()) return durable.status();
    tally_.SnapshotTaken();
    return EncodeSnapshotDescriptor({*durable, options_.node_id});
  }

  bool PrepareSnapshot(absl::string_view text) override {
    absl::StatusOr<SnapshotDescriptor> descriptor =
        DecodeSnapshotDescriptor(text);
    // Restore reports what is wrong with it.
    if (!descriptor.ok() || prefetch_ == nullptr) return true;
    if (state_->applied_index() >= descriptor->index) return true;
    return prefetch_->Prepare(
        descriptor->index,
        members_.SnapshotSources(descriptor->taker, options_.node_id));
  }

  absl::Status Restore(absl::string_view text) override {
    absl::StatusOr<SnapshotDescriptor> descriptor =
        DecodeSnapshotDescriptor(text);
    if (!descriptor.ok()) return descriptor.status();
    const uint64_t before = state_->applied_index();
    if (before >= descriptor->index) return absl::OkStatus();
    std::optional<uint64_t> fetched;
    if (prefetch_ != nullptr)
      fetched = prefetch_->TakeFetched(descriptor->index);
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

  // The directory learns the client addresses the state recorded.
  void ReloadMembers() {
    absl::StatusOr<std::map<uint64_t, std::string>> recorded =
        state_->Members();
    // A closed state records nothing more: the configured peers stay.
    members_.Reload(recorded.ok() ? *recorded
                                  : std::map<uint64_t, std::string>());
  }

  std::string OutgoingRoot() const { return options_.state.path + ".outgoing"; }

  void Tick(const ConsensusStatus& status) override {
    tally_.ObserveLeader(status.leader_id);
    const bool leader = status.role == Role::kLeader;
    leader_id_.store(status.leader_id);
    const bool was_leader = is_leader_.exchange(leader);
    if (was_leader && !leader) {
      AnswerAllWaiters();
      FailQueued(members_.NotLeader(status.leader_id));
    }
    if (leader && !parked_.empty()) {
      for (PendingOp& p : parked_.TakeDue(options_.clock->NowMillis())) {
        Requeue(std::move(p));
      }
    }
  }

  const ReplicatedStoreOptions options_;
  const std::unique_ptr<ReplicatedState> state_;
  const uint64_t incarnation_;
  MemberDirectory members_;
  std::unique_ptr<Consensus> consensus_;
  // Null without a way to fetch.
  const std::unique_ptr<SnapshotPrefetch> prefetch_;
  // A restart behind its own snapshot waits this many rounds (a second
  // apart) for a member to send it: after a whole group lost power, the
  // others are starting too, and exiting would only ask a supervisor to try
  // again later.
  static constexpr int kRestartFetchRounds = 60;
  // Set once the engine started: Restore then never fetches.
  std::atomic<bool> running_{false};

  std::atomic<bool> closed_{false};
  static constexpr int64_t kHandOffIntervalMs = 2000;
  // Watches free space; null without a floor.
  std::unique_ptr<WriteHealth> space_;
  std::atomic<int64_t> last_hand_off_ms_{INT64_MIN / 2};
  std::atomic<bool> draining_{false};
  std::atomic<bool> is_leader_{false};
  std::atomic<uint64_t> leader_id_{0};

  absl::Mutex mu_;
  std::deque<PendingOp> queue_ ABSL_GUARDED_BY(mu_);
  bool drain_posted_ ABSL_GUARDED_BY(mu_) = false;
  int inflight_entries_ ABSL_GUARDED_BY(mu_) = 0;

  // Consensus thread only (and Close, once that thread is gone).
  uint64_t sequence_ = 0;
  std::map<uint64_t, std::vector<PendingOp>> proposed_;

  std::atomic<uint64_t> outgoing_sequence_{0};
  ReplicationTally tally_{options_.clock};
  ParkedBegins parked_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicatedStore>> ReplicatedStore::Open(
    ReplicatedStoreOptions options) {
  if (options.clock == nullptr) options.clock = RealClock();
  // Checkpoints being sent when the process stopped.
  std::error_code ec;
  std::filesystem::remove_all(options.state.path + ".outgoing", ec);
  absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
      ReplicatedState::Open(options.state);
  if (!state.ok()) return state.status();
  auto store = std::make_unique<ReplicatedStoreImpl>(std::move(options),
                                                     *std::move(state));
  if (absl::Status s = store->Start(); !s.ok()) return s;
  return store;
}

}  // namespace dedup
