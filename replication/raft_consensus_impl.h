// The libraft-backed Consensus (raft_consensus.h's StartRaft), shared by the
// files that implement it: raft_consensus.cc (start, proposals, membership),
// raft_consensus_fsm.cc (libraft's state machine callbacks and request
// completions) and raft_consensus_loop.cc (the backend's io hooks, ticks,
// posted work, closing, status). Private to those files.
//
// Thread safety: Post, Status and Stop may be called from any thread (Stop
// not from the loop's); everything else, Start's work included, runs on the
// consensus thread: the thread of the RaftLoop, which other groups may share.
#ifndef DEDUP_REPLICATION_RAFT_CONSENSUS_IMPL_H_
#define DEDUP_REPLICATION_RAFT_CONSENSUS_IMPL_H_

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "replication/consensus.h"
#include "replication/log_budget.h"
#include "replication/peer_transport.h"
#include "replication/raft_consensus.h"
#include "replication/raft_consensus_shared_loop.h"
#include "replication/raft_prevote_tiebreak.h"

namespace dedup::raft_internal {

using Done = absl::AnyInvocable<void(absl::Status) &&>;

class RaftConsensus : public Consensus, private RaftLoop::Ticked {
 public:
  RaftConsensus(const RaftOptions& options, StateMachine* machine)
      : options_(options),
        machine_(machine),
        log_budget_(options.log_budget_bytes, options.snapshot_threshold,
                    options.snapshot_trailing) {}

  ~RaftConsensus() override { Stop(); }

  // Any thread but the loop's.
  absl::Status Start();

  // Appends the configuration {this node: voter} to the log on disk.
  int ForceSoleVoter();

  absl::Status Propose(std::string entry, Done done) override;

  void Post(absl::AnyInvocable<void() &&> fn) override;

  ConsensusStatus Status() const override;

  absl::Status AddMember(uint64_t id, const std::string& raft_address,
                         Done done) override;

  absl::Status RemoveMember(uint64_t id, Done done) override;

  absl::Status TransferLeadership(uint64_t id, Done done) override;

  void Stop() override;

 private:
  // The peer plane (the given one, or a plaintext one of our own) bound to
  // the Raft address, and libraft's transport over it.
  absl::Status StartTransport();

  // Start's work on the loop thread. On failure, begins closing what was
  // opened on the loop; closed_ is notified once it is closed.
  absl::Status StartOnLoop();
  absl::Status StartEngine();
  // Loop thread: the handles Start opened are closed (transport: only its
  // own handles were opened; engine: libraft was initialized).
  enum class Opened { kNothing, kTransport, kEngine };
  void AbortStart(Opened opened);

  // Loop thread: runs what Post queued, then refreshes the status.
  void RunPosted();
  // Loop thread: ends the engine (raft_close); closed_ once it is closed.
  void Close();

  // Every tick of the loop: libraft's tick (a leader's every
  // raft_tick_every_ ticks, on the same ticks for every group of the loop),
  // held snapshots, status.
  void OnTick(uint64_t tick) override;

  struct ApplyRequest {
    struct raft_apply req;
    Done done;
  };
  struct ChangeRequest {
    struct raft_change req;
    RaftConsensus* self;
    uint64_t id;
    Done done;
  };
  struct TransferRequest {
    struct raft_transfer req;
    RaftConsensus* self;
    Done done;
  };

  static RaftConsensus* Of(struct raft_fsm* fsm) {
    return static_cast<RaftConsensus*>(fsm->data);
  }

  static int FsmApply(struct raft_fsm* fsm, const struct raft_buffer* buf,
                      void** result);

  // Consensus thread: libraft reads both counts after each apply.
  void FitLogToBudget(size_t entry_bytes);

  static int FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                         unsigned* n_bufs);

  static int FsmSnapshotFinalize(struct raft_fsm*, struct raft_buffer* bufs[],
                                 unsigned* n_bufs);

  static int FsmRestore(struct raft_fsm* fsm, struct raft_buffer* buf);

  static int CountingAppend(struct raft_io* io, struct raft_io_append* req,
                            const struct raft_entry entries[], unsigned n,
                            raft_io_append_cb cb);

  // The backend's completion of CountingAppend's request: a failure ends
  // the process before libraft sees it (see StopOnStorageFailure).
  static void AppendDone(struct raft_io_append* req, int status);

  static int StartIo(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick,
                     raft_io_recv_cb recv);

  static void Receive(struct raft_io* io, struct raft_message* message);
  // Loop thread, every message before libraft: true for a pre-vote request
  // the tie-break sets aside (raft_prevote_tiebreak.h), which libraft then
  // never sees; pre-vote answers are noted.
  bool SetAsidePreVote(const struct raft_message& message);
  PreVoteTieBreak::Self TieBreakView();
  // The term of the last entry in the log (or of its snapshot).
  uint64_t LastLogTerm() const;

  // What the backend's own tick timer calls (it never fires in practice).
  static void NoTick(struct raft_io* io);

  // A leader's InstallSnapshot reaches libraft only once the state it
  // describes is on this node. libraft would otherwise store the snapshot
  // and leave the node "installing" until Restore returned: such a node
  // neither starts an election nor, in later libraft versions, grants a
  // vote (replicationInstallSnapshotBusy), and Restore would have to fetch
  // the whole state on this thread. Held back, the message waits while the
  // state machine fetches on a thread of its own; the node answers
  // everything else as a follower with its old log. A message held for
  // long is as good as one delayed by the network: libraft rejects it if
  // its term is over, and a leader re-sends a snapshot it still needs.
  void ReceiveSnapshot(struct raft_message* message);

  // Consensus thread, each tick: hands the held snapshot to libraft once
  // its state is here.
  void MaybeDeliverHeldSnapshot();

  // A snapshot_put of libraft's is in flight (r->snapshot.put.data is set
  // from the put's start to its callback).
  bool StoringSnapshot() const { return raft_.snapshot.put.data != nullptr; }

  void DropHeldSnapshot();

  static void OnApplied(struct raft_apply* req, int status, void*);

  static void OnAdded(struct raft_change* req, int status);

  static void OnChanged(struct raft_change* req, int status);

  static void OnTransferred(struct raft_transfer* req);

  static void OnRaftClosed(struct raft* r);

  // Once libraft has closed, its configuration and log are freed (reading
  // them was a use after free, caught by ASan): the last status stays,
  // marked unavailable with no leader.
  void PublishClosed();

  // Consensus thread (or the starting thread before the loop runs).
  void RefreshStatus();
  // RefreshStatus when the role or the known leader changed since the last
  // one: the state machine hears of a message's effect at once (a node
  // that just won an election serves, a deposed one names the winner).
  void RefreshIfRoleChanged();

  const RaftOptions options_;
  StateMachine* const machine_;
  LogBudget log_budget_;  // consensus thread

  std::shared_ptr<RaftLoop> loop_;  // set by Start
  unsigned raft_tick_every_ = 1;    // loop ticks per libraft tick
  bool started_ = false;            // Start succeeded (Start's thread)
  bool uv_inited_ = false;          // raft_uv_init succeeded (loop thread)
  bool running_ = false;            // the engine started (loop thread)
  absl::Notification closed_;       // the engine's handles are all closed
  // Shared with the plane's threads (they check inbound peers against it);
  // the transport is closed by libraft (raft_close) before the loop ends.
  const std::shared_ptr<PeerGroup> peer_group_ = std::make_shared<PeerGroup>();
  std::unique_ptr<PeerTransport> transport_;
  // The backend's raft_io, first member so that libraft's raft_io pointer
  // leads back here, with the append it was given.
  struct CountedIo {
    struct raft_io io;
    RaftConsensus* self = nullptr;
    int (*append)(struct raft_io*, struct raft_io_append*,
                  const struct raft_entry[], unsigned,
                  raft_io_append_cb) = nullptr;
    // libraft's callback of each append in flight (the backend is given
    // AppendDone instead).
    absl::flat_hash_map<struct raft_io_append*, raft_io_append_cb> callbacks;
    // The backend's start, and libraft's receive and tick callbacks (the
    // backend is given Receive instead, and a tick that never comes: the
    // loop's timer calls libraft's).
    int (*start)(struct raft_io*, unsigned, raft_io_tick_cb,
                 raft_io_recv_cb) = nullptr;
    raft_io_recv_cb recv = nullptr;
    raft_io_tick_cb tick = nullptr;
  };
  CountedIo io_{};
  // The io_ of each append in flight on this thread's loop (the backend's
  // callback carries no pointer of ours; the loop may run several groups).
  static absl::flat_hash_map<struct raft_io_append*, CountedIo*>&
  AppendsInFlight();
  std::atomic<uint64_t> log_appends_{0};
  std::atomic<uint64_t> log_appended_entries_{0};
  // A leader's InstallSnapshot waiting for its state (consensus thread).
  struct HeldSnapshot {
    struct raft_message message;
    std::string address;  // the sender's, which the transport may free
  };
  std::unique_ptr<HeldSnapshot> held_;
  PreVoteTieBreak tie_break_;  // consensus thread
  struct raft_fsm fsm_ {};
  struct raft raft_ {};
  bool closing_ = false;  // consensus thread
  // Transfers libraft has ended, kept a while (consensus thread): libraft
  // 0.15 may end a transfer (stepping down) while the transport still holds
  // its TimeoutNow send, whose completion then reads the request. Freeing it
  // at once crashed nodes (a SIGSTOPped leader resumed, stepped down, and
  // the send completed into freed memory). Bounded: the oldest goes first.
  std::deque<std::unique_ptr<TransferRequest>> ended_transfers_;
  uint64_t last_leader_id_ = 0;
  uint64_t leader_changes_ = 0;

  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  uint64_t ticks_ = 0;  // consensus thread
  mutable absl::Mutex status_mu_;
  ConsensusStatus status_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace dedup::raft_internal

#endif  // DEDUP_REPLICATION_RAFT_CONSENSUS_IMPL_H_
