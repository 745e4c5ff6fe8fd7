#include "replication/replicated_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "storage/state_dir_swap.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

// Exit code of a node whose state could not be replaced by a snapshot it
// fetched (the data dir's own error code: a restart recovers it).
constexpr int kExitSnapshotInstall = 3;

// One queued operation and whoever waits for its answer (one callback set).
struct PendingOp {
  LogOp op;
  int64_t wait_deadline_ms = 0;  // Begin: park until then while IN_USE
  bool waited = false;
  StoreCallback<BeginResult> begin_done;
  StoreCallback<FencedDecision> fenced_done;
  StoreCallback<std::optional<Record>> get_done;
  StoreCallback<bool> forget_done;

  size_t bytes() const {
    return 64 + op.skey.size() + op.begin.args_hash.size() +
           op.begin.owner.size() + op.complete.result.size();
  }

  void Fail(const absl::Status& status) && {
    if (begin_done) std::move(begin_done)(status);
    if (fenced_done) std::move(fenced_done)(status);
    if (get_done) std::move(get_done)(status);
    if (forget_done) std::move(forget_done)(status);
  }
};

// A Begin parked on the leader, with the decision it would get now.
struct Waiter {
  PendingOp op;
  BeginDecision last;
  int64_t next_check_ms = 0;
};

absl::Status UnknownOutcome(absl::string_view why) {
  absl::Status status = absl::AbortedError(absl::StrCat(
      "outcome unknown: ", why,
      "; the operation may or may not take effect. Retry a Begin with the "
      "same owner, a Complete with the same fence and result"));
  status.SetPayload(kOutcomeUnknownPayload, absl::Cord("unknown"));
  return status;
}

class ReplicatedStoreImpl : public ReplicatedStore, private StateMachine {
 public:
  ReplicatedStoreImpl(ReplicatedStoreOptions options,
                      std::unique_ptr<ReplicatedState> state)
      : options_(std::move(options)),
        state_(std::move(state)),
        incarnation_(std::random_device()() ^
                     (static_cast<uint64_t>(std::random_device()()) << 32)) {
    for (const ClusterNode& node : options_.nodes) {
      client_address_[node.id] = node.client_address;
    }
  }

  ~ReplicatedStoreImpl() override { (void)Close(); }

  absl::Status Start() {
    absl::StatusOr<std::unique_ptr<Consensus>> consensus =
        StartRaft(options_.raft, this);
    if (!consensus.ok()) return consensus.status();
    consensus_ = *std::move(consensus);
    return absl::OkStatus();
  }

  // --- Store -------------------------------------------------------------

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override {
    PendingOp p;
    p.op.type = OpType::kBegin;
    p.op.skey = EncodeStorageKey(ns, key);
    p.op.begin = std::move(params);
    p.wait_deadline_ms =
        wait_ms > 0 ? options_.clock->NowMillis() + wait_ms : 0;
    p.begin_done = std::move(done);
    Submit(std::move(p));
  }

  void Complete(std::string ns, std::string key, CompleteParams params,
                StoreCallback<FencedDecision> done) override {
    PendingOp p;
    p.op.type = OpType::kComplete;
    p.op.skey = EncodeStorageKey(ns, key);
    p.op.complete = std::move(params);
    p.fenced_done = std::move(done);
    Submit(std::move(p));
  }

  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override {
    PendingOp p;
    p.op.type = OpType::kRelease;
    p.op.skey = EncodeStorageKey(ns, key);
    p.op.fence = fence;
    p.fenced_done = std::move(done);
    Submit(std::move(p));
  }

  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override {
    PendingOp p;
    p.op.type = OpType::kRenew;
    p.op.skey = EncodeStorageKey(ns, key);
    p.op.fence = fence;
    p.op.lease_ms = lease_ms;
    p.fenced_done = std::move(done);
    Submit(std::move(p));
  }

  void BeginMany(std::vector<BeginCall> calls) override {
    for (BeginCall& call : calls) {
      Begin(std::move(call.ns), std::move(call.key), std::move(call.params), 0,
            std::move(call.done));
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
    PendingOp p;
    p.op.type = OpType::kGet;
    p.op.skey = EncodeStorageKey(ns, key);
    p.get_done = std::move(done);
    Submit(std::move(p));
  }

  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override {
    PendingOp p;
    p.op.type = OpType::kForget;
    p.op.skey = EncodeStorageKey(ns, key);
    p.forget_done = std::move(done);
    Submit(std::move(p));
  }

  absl::Status CheckServing() const override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    if (!is_leader_.load()) return NotLeader(leader_id_.load());
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
    if (consensus_ != nullptr) {
      consensus_->Post([this] {
        AnswerAllWaiters();
        FailQueued(absl::UnavailableError("store is closed"));
      });
      consensus_->Stop();
    }
    // The consensus thread is gone: what it left unanswered is answered
    // here. A proposed entry may still commit elsewhere.
    for (auto& [sequence, ops] : proposed_) {
      CountUnknown(ops.size());
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
    stats.waiting_begins = waiting_.load();
    return stats;
  }

  absl::StatusOr<uint64_t> CountStoredRecords() override {
    return state_->CountStoredRecords();
  }

  // --- ReplicatedStore ---------------------------------------------------

  ClusterStatus GetClusterStatus() const override {
    ClusterStatus status;
    if (consensus_ != nullptr) status.consensus = consensus_->Status();
    status.nodes = options_.nodes;
    status.state_applied_index = state_->applied_index();
    status.replicated_now_ms = state_->now_ms();
    status.last_fence = state_->last_fence();
    absl::MutexLock lock(&counters_mu_);
    status.counters = counters_;
    return status;
  }

  absl::StatusOr<StateDigest> Digest() override {
    return state_->ComputeDigest();
  }

  absl::StatusOr<OutgoingCheckpoint> CreateOutgoingCheckpoint() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    std::error_code ec;
    std::filesystem::create_directories(OutgoingRoot(), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", OutgoingRoot(), ": ", ec.message()));
    }
    OutgoingCheckpoint out;
    out.dir =
        absl::StrCat(OutgoingRoot(), "/", outgoing_sequence_.fetch_add(1));
    std::filesystem::remove_all(out.dir, ec);
    absl::StatusOr<uint64_t> applied = state_->Checkpoint(out.dir);
    if (!applied.ok()) {
      std::filesystem::remove_all(out.dir, ec);
      return applied.status();
    }
    out.applied_index = *applied;
    {
      absl::MutexLock lock(&counters_mu_);
      ++counters_.snapshots_sent;
    }
    return out;
  }

  void AddMember(ClusterNode node, Done done) override {
    OnLoop(std::move(done), [this, node](Done done) {
      return consensus_->AddMember(node.id, node.raft_address, std::move(done));
    });
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

  absl::Status NotLeader(uint64_t leader) const {
    auto it = client_address_.find(leader);
    if (leader == 0 || it == client_address_.end()) {
      return absl::UnavailableError(
          "not the leader, and no leader is known yet (an election is in "
          "progress); retry with backoff");
    }
    absl::Status status = absl::UnavailableError(absl::StrCat(
        "not the leader; the leader is node ", leader, " at ", it->second));
    status.SetPayload(kLeaderAddressPayload, absl::Cord(it->second));
    return status;
  }

  void Submit(PendingOp p) {
    if (absl::Status s = CheckServing(); !s.ok()) {
      std::move(p).Fail(s);
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
          refusal = NotLeader(leader_id_.load());
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
    entry.proposer = options_.raft.id;
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
              ? NotLeader(leader_id_.load())
              : absl::UnavailableError(proposed.message());
      for (PendingOp& p : ops) std::move(p).Fail(error);
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      ++inflight_entries_;
    }
    {
      absl::MutexLock lock(&counters_mu_);
      ++counters_.entries_proposed;
      counters_.operations_proposed += ops.size();
    }
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
      if (!status.ok()) CountUnknown(it->second.size());
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
    absl::StatusOr<AppliedEntry> applied = state_->Apply(index, *entry);
    if (!applied.ok()) return applied.status();
    if (applied->skipped) return absl::OkStatus();
    if (entry->proposer == options_.raft.id &&
        entry->incarnation == incarnation_) {
      auto it = proposed_.find(entry->sequence);
      if (it != proposed_.end()) {
        std::vector<PendingOp> ops = std::move(it->second);
        proposed_.erase(it);
        for (size_t i = 0; i < ops.size(); ++i) {
          Answer(std::move(ops[i]), std::move(applied->answers[i]),
                 applied->now_ms);
        }
      }
    }
    for (const std::string& skey : applied->settled_keys) WakeKey(skey);
    return absl::OkStatus();
  }

  void Answer(PendingOp p, OpAnswer answer, int64_t now_ms) {
    if (auto* error = std::get_if<absl::Status>(&answer)) {
      std::move(p).Fail(*error);
      return;
    }
    switch (p.op.type) {
      case OpType::kBegin: {
        BeginDecision& d = std::get<BeginDecision>(answer);
        if (d.status == BeginStatus::kInUse && !draining_.load() &&
            now_ms < p.wait_deadline_ms) {
          Park(std::move(p), std::move(d));
          return;
        }
        std::move(p.begin_done)(BeginResult{std::move(d), p.waited});
        return;
      }
      case OpType::kComplete:
      case OpType::kRelease:
      case OpType::kRenew:
        std::move(p.fenced_done)(std::get<FencedDecision>(std::move(answer)));
        return;
      case OpType::kGet:
        std::move(p.get_done)(
            std::get<std::optional<Record>>(std::move(answer)));
        return;
      case OpType::kForget:
        std::move(p.forget_done)(std::get<bool>(answer));
        return;
    }
  }

  void Park(PendingOp p, BeginDecision last) {
    p.waited = true;
    Waiter waiter;
    waiter.next_check_ms =
        std::min(p.wait_deadline_ms, last.record.lease_until_ms);
    waiter.last = std::move(last);
    const std::string skey = p.op.skey;
    waiter.op = std::move(p);
    waiters_[skey].push_back(std::move(waiter));
    waiting_.fetch_add(1);
  }

  // Proposes again the Begins parked on `skey` (their owner finished), in
  // arrival order.
  void WakeKey(const std::string& skey) {
    auto it = waiters_.find(skey);
    if (it == waiters_.end()) return;
    std::vector<Waiter> woken = std::move(it->second);
    waiters_.erase(it);
    waiting_.fetch_sub(woken.size());
    for (Waiter& w : woken) Requeue(std::move(w.op));
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

  void WakeDue(int64_t now_ms) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      std::vector<Waiter>& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->next_check_ms <= now_ms) {
          Requeue(std::move(w->op));
          w = list.erase(w);
          waiting_.fetch_sub(1);
        } else {
          ++w;
        }
      }
      if (list.empty()) {
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  // Answers every parked Begin with its last decision (IN_USE).
  void AnswerAllWaiters() {
    auto waiters = std::move(waiters_);
    waiters_.clear();
    const int64_t now = options_.clock->NowMillis();
    for (auto& [skey, list] : waiters) {
      for (Waiter& w : list) {
        w.last.retry_after_ms = std::clamp<int64_t>(
            w.last.record.lease_until_ms - now, 1, kMaxRetryAfterMs);
        waiting_.fetch_sub(1);
        std::move(w.op.begin_done)(BeginResult{std::move(w.last), true});
      }
    }
  }

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
    {
      absl::MutexLock lock(&counters_mu_);
      ++counters_.snapshots_taken;
    }
    return absl::StrCat("dedup-snapshot/1 ", *durable, " ", options_.raft.id);
  }

  absl::Status Restore(absl::string_view descriptor) override {
    std::vector<absl::string_view> parts = absl::StrSplit(descriptor, ' ');
    uint64_t index = 0;
    uint64_t source = 0;
    if (parts.size() != 3 || parts[0] != "dedup-snapshot/1" ||
        !absl::SimpleAtoi(parts[1], &index) ||
        !absl::SimpleAtoi(parts[2], &source)) {
      return absl::DataLossError("snapshot descriptor is malformed");
    }
    // This node's own snapshot at a restart, or one it already has.
    if (state_->applied_index() >= index) return absl::OkStatus();
    if (!options_.fetch_checkpoint) {
      return absl::UnimplementedError(absl::StrCat(
          "this node's state is at index ", state_->applied_index(),
          " and needs the snapshot at index ", index, " from node ", source,
          ", but it has no way to fetch one"));
    }
    // The consensus thread blocks for the transfer: a follower installing a
    // snapshot has nothing else to do, and must not apply entries meanwhile.
    absl::Status last = absl::UnavailableError("no member to fetch from");
    for (const std::string& address : SnapshotSources(source)) {
      const std::string incoming = state_->IncomingDir();
      std::error_code ec;
      std::filesystem::remove_all(incoming, ec);
      absl::StatusOr<uint64_t> fetched =
          options_.fetch_checkpoint(address, index, incoming);
      if (!fetched.ok()) {
        last = fetched.status();
        std::fprintf(stderr, "dedupd: snapshot %llu from %s: %s\n",
                     static_cast<unsigned long long>(index), address.c_str(),
                     std::string(last.message()).c_str());
        std::filesystem::remove_all(incoming, ec);
        continue;
      }
      if (absl::Status s = state_->ReplaceWith(incoming); !s.ok()) {
        // The old state is closed and maybe moved: nothing can be applied.
        std::fprintf(stderr,
                     "dedupd: FATAL: installing the snapshot at index %llu "
                     "failed: %s; stopping (a restart recovers the data dir)\n",
                     static_cast<unsigned long long>(index),
                     std::string(s.message()).c_str());
        std::fflush(stderr);
        _exit(kExitSnapshotInstall);
      }
      std::fprintf(stderr,
                   "dedupd: installed a snapshot from %s at index %llu "
                   "(needed %llu)\n",
                   address.c_str(), static_cast<unsigned long long>(*fetched),
                   static_cast<unsigned long long>(index));
      absl::MutexLock lock(&counters_mu_);
      ++counters_.snapshots_installed;
      return absl::OkStatus();
    }
    return last;
  }

  // Client addresses to fetch a snapshot from: its taker first, then every
  // other member this node knows.
  std::vector<std::string> SnapshotSources(uint64_t taker) const {
    std::vector<std::string> out;
    if (auto it = client_address_.find(taker); it != client_address_.end()) {
      out.push_back(it->second);
    }
    for (const ClusterNode& node : options_.nodes) {
      if (node.id != taker && node.id != options_.raft.id) {
        out.push_back(node.client_address);
      }
    }
    return out;
  }

  // Times each spell without a known leader.
  void ObserveLeaderless(uint64_t leader_id) {
    const int64_t now = options_.clock->NowMillis();
    if (leader_id == 0) {
      if (leaderless_since_ms_ == 0) leaderless_since_ms_ = now;
      return;
    }
    if (leaderless_since_ms_ == 0) return;
    const double seconds = (now - leaderless_since_ms_) / 1000.0;
    leaderless_since_ms_ = 0;
    size_t bucket = 0;
    while (bucket < std::size(kLeaderlessBucketsS) &&
           seconds > kLeaderlessBucketsS[bucket]) {
      ++bucket;
    }
    absl::MutexLock lock(&counters_mu_);
    ++counters_.leaderless_buckets[bucket];
    counters_.leaderless_sum_s += seconds;
  }

  void CountUnknown(size_t n) {
    absl::MutexLock lock(&counters_mu_);
    counters_.unknown_outcomes += n;
  }

  std::string OutgoingRoot() const { return options_.state.path + ".outgoing"; }

  void Tick(const ConsensusStatus& status) override {
    ObserveLeaderless(status.leader_id);
    const bool leader = status.role == Role::kLeader;
    leader_id_.store(status.leader_id);
    const bool was_leader = is_leader_.exchange(leader);
    if (was_leader && !leader) {
      AnswerAllWaiters();
      FailQueued(NotLeader(status.leader_id));
    }
    if (leader && !waiters_.empty()) WakeDue(options_.clock->NowMillis());
  }

  const ReplicatedStoreOptions options_;
  const std::unique_ptr<ReplicatedState> state_;
  const uint64_t incarnation_;
  absl::flat_hash_map<uint64_t, std::string> client_address_;
  std::unique_ptr<Consensus> consensus_;

  std::atomic<bool> closed_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> is_leader_{false};
  std::atomic<uint64_t> leader_id_{0};
  std::atomic<uint64_t> waiting_{0};

  absl::Mutex mu_;
  std::deque<PendingOp> queue_ ABSL_GUARDED_BY(mu_);
  bool drain_posted_ ABSL_GUARDED_BY(mu_) = false;
  int inflight_entries_ ABSL_GUARDED_BY(mu_) = 0;

  // Consensus thread only (and Close, once that thread is gone).
  uint64_t sequence_ = 0;
  std::map<uint64_t, std::vector<PendingOp>> proposed_;
  int64_t leaderless_since_ms_ = 0;

  std::atomic<uint64_t> outgoing_sequence_{0};
  mutable absl::Mutex counters_mu_;
  ReplicationCounters counters_ ABSL_GUARDED_BY(counters_mu_);
  absl::flat_hash_map<std::string, std::vector<Waiter>> waiters_;
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
