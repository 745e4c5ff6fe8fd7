#include "tests/unit/fake_consensus.h"

#include <utility>

namespace dedup::testing {

FakeConsensus::FakeConsensus(StateMachine* machine, uint64_t id)
    : machine_(machine) {
  status_.id = id;
  status_.role = Role::kFollower;
}

absl::Status FakeConsensus::Propose(std::string entry, Done done) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || status_.role != Role::kLeader) {
    return absl::FailedPreconditionError("not the leader");
  }
  proposals_.push_back({std::move(entry), std::move(done)});
  ++status_.last_index;
  return absl::OkStatus();
}

void FakeConsensus::Post(absl::AnyInvocable<void() &&> fn) {
  absl::MutexLock lock(&mu_);
  if (!stopping_) posted_.push_back(std::move(fn));
}

ConsensusStatus FakeConsensus::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status FakeConsensus::AddMember(uint64_t id,
                                      const std::string& raft_address,
                                      Done done) {
  return RecordChange({Change::Kind::kAdd, id, raft_address}, std::move(done));
}

absl::Status FakeConsensus::RemoveMember(uint64_t id, Done done) {
  return RecordChange({Change::Kind::kRemove, id, ""}, std::move(done));
}

absl::Status FakeConsensus::TransferLeadership(uint64_t id, Done done) {
  return RecordChange({Change::Kind::kTransfer, id, ""}, std::move(done));
}

absl::Status FakeConsensus::RecordChange(Change change, Done done) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || status_.role != Role::kLeader) {
    return absl::FailedPreconditionError("not the leader");
  }
  changes_.push_back(std::move(change));
  change_dones_.push_back(std::move(done));
  return absl::OkStatus();
}

void FakeConsensus::Stop() {
  std::deque<absl::AnyInvocable<void() &&>> posted;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    posted.swap(posted_);
  }
  for (auto& fn : posted) std::move(fn)();
  AbortPending(absl::AbortedError("the engine stopped"));
  absl::MutexLock lock(&mu_);
  status_.role = Role::kUnavailable;
}

size_t FakeConsensus::RunPosted() {
  size_t ran = 0;
  for (;;) {
    absl::AnyInvocable<void() &&> fn;
    {
      absl::MutexLock lock(&mu_);
      if (posted_.empty()) return ran;
      fn = std::move(posted_.front());
      posted_.pop_front();
    }
    std::move(fn)();
    ++ran;
  }
}

std::vector<std::string> FakeConsensus::PendingEntries() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> entries;
  for (const Proposal& p : proposals_) entries.push_back(p.entry);
  return entries;
}

size_t FakeConsensus::pending() const {
  absl::MutexLock lock(&mu_);
  return proposals_.size();
}

absl::Status FakeConsensus::Commit(size_t n) {
  for (size_t i = 0; i < n; ++i) {
    std::string entry;
    uint64_t index = 0;
    {
      absl::MutexLock lock(&mu_);
      if (proposals_.empty()) break;
      entry = proposals_.front().entry;
      index = status_.applied_index + 1;
    }
    if (absl::Status s = machine_->Apply(index, entry); !s.ok()) return s;
    Done done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(proposals_.front().done);
      proposals_.pop_front();
      status_.commit_index = status_.applied_index = index;
    }
    std::move(done)(absl::OkStatus());
  }
  return absl::OkStatus();
}

absl::Status FakeConsensus::Follow(const std::string& entry) {
  uint64_t index = 0;
  {
    absl::MutexLock lock(&mu_);
    index = status_.applied_index + 1;
  }
  if (absl::Status s = machine_->Apply(index, entry); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  status_.commit_index = status_.applied_index = index;
  return absl::OkStatus();
}

void FakeConsensus::BecomeLeader() {
  {
    absl::MutexLock lock(&mu_);
    status_.role = Role::kLeader;
    ++status_.term;
    status_.leader_id = status_.id;
    ++status_.leader_changes;
  }
  Tick();
}

void FakeConsensus::LoseLeadership(uint64_t new_leader) {
  {
    absl::MutexLock lock(&mu_);
    status_.role = Role::kFollower;
    ++status_.term;
    status_.leader_id = new_leader;
    ++status_.leader_changes;
    // Entries this node appended but did not commit: the new leader's log
    // replaces them here.
    status_.last_index = status_.applied_index;
  }
  AbortPending(absl::AbortedError("leadership lost"));
  Tick();
}

void FakeConsensus::Tick() { machine_->Tick(Status()); }

std::vector<FakeConsensus::Change> FakeConsensus::changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

size_t FakeConsensus::pending_changes() const {
  absl::MutexLock lock(&mu_);
  return change_dones_.size();
}

void FakeConsensus::FinishChange(absl::Status status) {
  Done done;
  {
    absl::MutexLock lock(&mu_);
    if (change_dones_.empty()) return;
    done = std::move(change_dones_.front());
    change_dones_.pop_front();
  }
  std::move(done)(std::move(status));
}

void FakeConsensus::AbortPending(const absl::Status& why) {
  std::deque<Proposal> proposals;
  std::deque<Done> changes;
  {
    absl::MutexLock lock(&mu_);
    proposals.swap(proposals_);
    changes.swap(change_dones_);
  }
  for (Proposal& p : proposals) std::move(p.done)(why);
  for (Done& done : changes) std::move(done)(why);
}

}  // namespace dedup::testing
