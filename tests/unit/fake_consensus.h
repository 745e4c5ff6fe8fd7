// A consensus engine for tests of the replicated store: one node, in memory,
// without a thread of its own. Nothing happens unless the test says so, so
// every step of a test is deterministic and no test sleeps.
//
// The thread that drives it (the test's) plays the consensus thread: Post
// only queues, and RunPosted runs the queue there; Commit applies proposed
// entries through StateMachine::Apply and then calls their `done`;
// LoseLeadership and BecomeLeader change the role and call
// StateMachine::Tick, as the real engine's status refresh does. Membership
// calls are recorded and finish when the test says (FinishChange).
//
// Thread safety: Post and Status may be called from any thread; everything
// else from the driving thread only. No callback runs with a lock held.
#ifndef DEDUP_TESTS_UNIT_FAKE_CONSENSUS_H_
#define DEDUP_TESTS_UNIT_FAKE_CONSENSUS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "replication/consensus.h"

namespace dedup::testing {

class FakeConsensus : public Consensus {
 public:
  // A membership call the store made.
  struct Change {
    enum class Kind { kAdd, kRemove, kTransfer };
    Kind kind = Kind::kAdd;
    uint64_t id = 0;
    std::string raft_address;  // kAdd only
  };

  // Starts as node `id`, a follower with no leader known (as a real node
  // starts). `machine` is not owned and must outlive this object.
  FakeConsensus(StateMachine* machine, uint64_t id);
  ~FakeConsensus() override = default;

  // --- Consensus ---------------------------------------------------------

  // Holds `entry` until Commit; FailedPrecondition when not the leader or
  // stopped.
  absl::Status Propose(std::string entry,
                       absl::AnyInvocable<void(absl::Status) &&> done) override;
  void Post(absl::AnyInvocable<void() &&> fn) override;
  ConsensusStatus Status() const override;
  // Recorded (see changes()); FailedPrecondition when not the leader.
  absl::Status AddMember(
      uint64_t id, const std::string& raft_address,
      absl::AnyInvocable<void(absl::Status) &&> done) override;
  absl::Status RemoveMember(
      uint64_t id, absl::AnyInvocable<void(absl::Status) &&> done) override;
  absl::Status TransferLeadership(
      uint64_t id, absl::AnyInvocable<void(absl::Status) &&> done) override;
  // Runs what was posted before it, then drops later posts and ends every
  // pending proposal and membership change with AbortedError, as a real
  // engine's close does.
  void Stop() override;

  // --- Test controls (the driving thread) --------------------------------

  // Runs posted functions, and those they post, until none is left.
  // Returns how many ran.
  size_t RunPosted();

  // Proposed entries not committed yet, oldest first.
  std::vector<std::string> PendingEntries() const;
  size_t pending() const;
  // Applies the `n` oldest pending entries (all when fewer) at the next
  // indexes, each followed by its `done(OK)`. Stops at the first Apply
  // error and returns it (the entry stays pending).
  absl::Status Commit(size_t n);
  absl::Status CommitAll() { return Commit(SIZE_MAX); }
  // Applies `entry`, which another node proposed (this one follows it), at
  // the next index, as a follower's engine does once it is committed.
  absl::Status Follow(const std::string& entry);

  // This node leads (a new term); the store hears it through Tick.
  void BecomeLeader();
  // Another node (`new_leader`, 0: none known) leads: pending proposals
  // end with AbortedError and are dropped from the log, then Tick.
  void LoseLeadership(uint64_t new_leader);
  // StateMachine::Tick with the current status.
  void Tick();

  // Every membership call accepted so far, oldest first.
  std::vector<Change> changes() const;
  size_t pending_changes() const;
  // Ends the oldest unfinished membership call with `status`.
  void FinishChange(absl::Status status);

 private:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  struct Proposal {
    std::string entry;
    Done done;
  };

  absl::Status RecordChange(Change change, Done done);
  // Takes every pending proposal and change, for ending them.
  void AbortPending(const absl::Status& why);

  StateMachine* const machine_;

  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ConsensusStatus status_ ABSL_GUARDED_BY(mu_);
  std::deque<Proposal> proposals_ ABSL_GUARDED_BY(mu_);
  std::vector<Change> changes_ ABSL_GUARDED_BY(mu_);
  std::deque<Done> change_dones_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_UNIT_FAKE_CONSENSUS_H_
