// ReplicatedStore's implementation (replicated_store.h), shared by its files:
// replicated_store.cc (start, close, membership), replicated_store_loop.cc
// (queueing and proposing on the consensus thread) and
// replicated_store_apply.cc (the StateMachine: applying entries, answering,
// snapshots, ticks). Private to those files.
//
// Thread safety: the Store and ReplicatedStore methods may be called from
// any thread; the StateMachine methods and the members marked so run on the
// consensus thread.
#ifndef DEDUP_REPLICATION_REPLICATED_STORE_IMPL_H_
#define DEDUP_REPLICATION_REPLICATED_STORE_IMPL_H_

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
#include "replication/replicated_store.h"
#include "replication/replication_tally.h"
#include "replication/snapshot_prefetch.h"
#include "replication/snapshot_transfer.h"
#include "storage/storage_key.h"
#include "storage/write_health.h"

namespace dedup::replicated_store_internal {

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

  absl::Status Start();

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
    // A hold (a transfer or an election) answers what it takes once the
    // leader is known: better than naming nobody, or a stale leader.
    if (!is_leader_.load() && !Holding()) {
      return members_.NotLeader(leader_id_.load());
    }
    return absl::OkStatus();
  }

  void DrainWaiters() override {
    draining_.store(true);
    if (consensus_ != nullptr) {
      consensus_->Post([this] { AnswerAllWaiters(); });
    }
  }

  absl::Status Close() override;

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
    status.counters.transfer_held_operations = transfer_held_.load();
    status.counters.orphaned_operations_answered = orphans_answered_.load();
    return status;
  }

  absl::Status CheckDiskSpace() const override {
    return space_ == nullptr ? absl::OkStatus() : space_->CheckWritable();
  }

  absl::StatusOr<StateDigest> Digest() override {
    return state_->ComputeDigest();
  }

  absl::StatusOr<ReplicatedState::StoredShardMap> StoredShardMap() override {
    return state_->ShardMap();
  }

  void ProposeShardMap(uint64_t expected_epoch, uint64_t epoch, std::string map,
                       StoreCallback<bool> done) override {
    Submit(PendingOp::Of(LogSetShardMap{expected_epoch, epoch, std::move(map)},
                         std::move(done)));
  }

  absl::StatusOr<OutgoingCheckpoint> CreateOutgoingCheckpoint() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    absl::StatusOr<OutgoingCheckpoint> out =
        MakeOutgoingCheckpoint(state_.get(), OutgoingRoot(),
                               absl::StrCat(outgoing_sequence_.fetch_add(1)));
    if (out.ok()) tally_.SnapshotSent();
    return out;
  }

  void AddMember(ClusterNode node, Done done) override;

  void RemoveMember(uint64_t id, Done done) override {
    OnLoop(std::move(done), [this, id](Done done) {
      return consensus_->RemoveMember(id, std::move(done));
    });
  }

  void TransferLeadership(uint64_t id, Done done) override {
    OnLoop(std::move(done), [this, id](Done done) {
      BeginTransfer();
      absl::Status s = consensus_->TransferLeadership(
          id, [this, done = std::move(done)](absl::Status status) mutable {
            EndTransfer();
            std::move(done)(std::move(status));
          });
      if (!s.ok()) EndTransfer();
      return s;
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

  void Submit(PendingOp p);

  // --- Holds: transfers, elections (replicated_store_transfer.cc) --------

  // Any thread: operations are held (see replicated_store.h).
  bool Holding() const {
    const int64_t until = hold_until_ms_.load();
    return until != 0 && options_.clock->NowMillis() < until;
  }
  // Consensus thread: holds operations (unless holding already), e.g. when
  // the leader becomes unknown.
  void StartHold();
  // Consensus thread: a transfer starts, or its engine call returned.
  void BeginTransfer();
  void EndTransfer();
  // Consensus thread: ends the hold once no transfer is in flight and a
  // leader is known (or it ran out), and has what it held drained: proposed
  // by a leader, refused naming the leader elsewhere.
  void MaybeReleaseHold(const ConsensusStatus& status);
  // Logs the leader this node now knows when it differs from `last_leader`.
  void LogLeaderChange(uint64_t last_leader,
                       const ConsensusStatus& status) const;
  // Consensus thread: keeps the operations of entry `sequence`, which lost
  // its leader, for this node's apply of it; false when not holding.
  bool KeepOrphaned(uint64_t sequence);
  // Consensus thread: answers the orphaned operations whose wait ran out
  // (outcome unknown) and forgets those answered by an apply.
  void ExpireOrphans(int64_t now_ms);

  // A leader short of disk space asks libraft to transfer leadership to the
  // most up-to-date voter, at most every kHandOffIntervalMs. (A member that
  // is short too hands it on in turn; writes wait meanwhile either way.)
  void HandOffLeadership();

  // Consensus thread: proposes what is queued, in entries.
  void Drain();

  void Propose(std::vector<PendingOp> ops);

  void OnProposalDone(uint64_t sequence, const absl::Status& status);

  // --- StateMachine (consensus thread) ----------------------------------

  absl::Status Apply(uint64_t index, absl::string_view bytes) override;

  void Answer(PendingOp p, OpAnswer answer, int64_t now_ms);

  // Proposes again the Begins parked on `skey` (their owner finished).
  void WakeKey(const std::string& skey) {
    for (PendingOp& p : parked_.TakeKey(skey)) Requeue(std::move(p));
  }

  void Requeue(PendingOp p);

  void AnswerAllWaiters() { parked_.AnswerAll(options_.clock->NowMillis()); }

  void FailQueued(const absl::Status& status);

  absl::StatusOr<std::string> Snapshot() override;

  bool PrepareSnapshot(absl::string_view text) override;

  absl::Status Restore(absl::string_view text) override;

  // The directory learns the client addresses the state recorded.
  void ReloadMembers();

  std::string OutgoingRoot() const { return options_.state.path + ".outgoing"; }

  void Tick(const ConsensusStatus& status) override;

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
  // Until when (clock ms) operations are held for a transfer or an
  // election; 0: none.
  std::atomic<int64_t> hold_until_ms_{0};
  // Operations held (transfers, elections), and orphaned ones later
  // answered from an apply, since the node started.
  std::atomic<uint64_t> transfer_held_{0};
  std::atomic<uint64_t> orphans_answered_{0};

  absl::Mutex mu_;
  std::deque<PendingOp> queue_ ABSL_GUARDED_BY(mu_);
  bool drain_posted_ ABSL_GUARDED_BY(mu_) = false;
  int inflight_entries_ ABSL_GUARDED_BY(mu_) = 0;
  size_t inflight_ops_ ABSL_GUARDED_BY(mu_) = 0;

  // Consensus thread only (and Close, once that thread is gone).
  uint64_t sequence_ = 0;
  std::map<uint64_t, std::vector<PendingOp>> proposed_;
  // Operations of each entry proposed and not yet done: sequence -> count.
  std::map<uint64_t, size_t> inflight_sizes_;
  bool transfer_in_flight_ = false;
  // Entries in proposed_ that lost their leader: sequence -> until when
  // (clock ms) they wait for this node's apply.
  std::map<uint64_t, int64_t> orphaned_;

  std::atomic<uint64_t> outgoing_sequence_{0};
  ReplicationTally tally_{options_.clock};
  ParkedBegins parked_;
};

}  // namespace dedup::replicated_store_internal

#endif  // DEDUP_REPLICATION_REPLICATED_STORE_IMPL_H_
