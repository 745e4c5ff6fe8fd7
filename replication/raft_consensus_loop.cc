// The consensus thread's side of RaftConsensus: the hooks on the backend's
// io (appends, received messages, held snapshots), the loop's async and
// timer callbacks, closing, and the published status.
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "replication/raft_codes.h"
#include "replication/raft_consensus_impl.h"

namespace dedup::raft_internal {

absl::flat_hash_map<struct raft_io_append*, RaftConsensus::CountedIo*>&
RaftConsensus::AppendsInFlight() {
  static thread_local absl::flat_hash_map<struct raft_io_append*, CountedIo*>
      appends;
  return appends;
}

int RaftConsensus::CountingAppend(struct raft_io* io,
                                  struct raft_io_append* req,
                                  const struct raft_entry entries[], unsigned n,
                                  raft_io_append_cb cb) {
  auto* counted = reinterpret_cast<CountedIo*>(io);
  counted->self->log_appends_.fetch_add(1);
  counted->self->log_appended_entries_.fetch_add(n);
  counted->callbacks[req] = cb;
  AppendsInFlight()[req] = counted;
  const int rv = counted->append(io, req, entries, n, &AppendDone);
  if (rv != 0) {
    counted->callbacks.erase(req);
    AppendsInFlight().erase(req);
  }
  if (rv != 0 && rv != RAFT_CANCELED && !counted->self->closing_) {
    StopOnStorageFailure(absl::StrCat(
        "cannot append ", n,
        " entries to the Raft log: ", AppendError(rv, counted->io.errmsg)));
  }
  return rv;
}

void RaftConsensus::AppendDone(struct raft_io_append* req, int status) {
  auto in_flight = AppendsInFlight().find(req);
  CountedIo* counted = in_flight->second;
  AppendsInFlight().erase(in_flight);
  auto it = counted->callbacks.find(req);
  const raft_io_append_cb cb = it->second;
  counted->callbacks.erase(it);
  // (Canceled: the backend is closing, as at a clean stop.)
  if (status != 0 && status != RAFT_CANCELED && !counted->self->closing_) {
    StopOnStorageFailure(absl::StrCat("a Raft log append failed: ",
                                      AppendError(status, counted->io.errmsg)));
  }
  cb(req, status);
}

int RaftConsensus::StartIo(struct raft_io* io, unsigned msecs,
                           raft_io_tick_cb tick, raft_io_recv_cb recv) {
  auto* counted = reinterpret_cast<CountedIo*>(io);
  (void)msecs;  // the loop's ticks (OnTick)
  counted->recv = recv;
  counted->tick = tick;
  // The backend's own timer would wake the loop at a phase of its own.
  constexpr unsigned kNever = std::numeric_limits<unsigned>::max();
  return counted->start(io, kNever, &RaftConsensus::NoTick,
                        &RaftConsensus::Receive);
}

void RaftConsensus::Receive(struct raft_io* io, struct raft_message* message) {
  auto* counted = reinterpret_cast<CountedIo*>(io);
  if (counted->self->SetAsidePreVote(*message)) return;
  if (message->type == RAFT_IO_INSTALL_SNAPSHOT && !counted->self->closing_) {
    counted->self->ReceiveSnapshot(message);
    return;
  }
  counted->recv(io, message);
  counted->self->RefreshIfRoleChanged();
}

PreVoteTieBreak::Self RaftConsensus::TieBreakView() {
  PreVoteTieBreak::Self self;
  self.id = options_.id;
  self.pre_candidate =
      raft_state(&raft_) == RAFT_CANDIDATE && raft_.candidate_state.in_pre_vote;
  self.term = raft_.current_term;
  self.round_start_ms = raft_.election_timer_start;
  self.last_log_index = raft_last_index(&raft_);
  self.last_log_term = LastLogTerm();
  return self;
}

bool RaftConsensus::SetAsidePreVote(const struct raft_message& message) {
  if (closing_ || !running_) return false;
  if (message.type == RAFT_IO_REQUEST_VOTE_RESULT) {
    if (message.request_vote_result.pre_vote == raft_tribool_true) {
      tie_break_.OnPreVoteAnswer(TieBreakView(), message.server_id);
    }
    return false;
  }
  if (message.type != RAFT_IO_REQUEST_VOTE) return false;
  const struct raft_request_vote& vote = message.request_vote;
  PreVoteTieBreak::Request request;
  request.from = message.server_id;
  request.term = vote.term;
  request.last_log_index = vote.last_log_index;
  request.last_log_term = vote.last_log_term;
  request.pre_vote = vote.pre_vote;
  request.disrupt_leader = vote.disrupt_leader;
  return tie_break_.SetAside(TieBreakView(), request);
}

uint64_t RaftConsensus::LastLogTerm() const {
  const struct raft_log& log = raft_.log;
  return log.front == log.back
             ? log.snapshot.last_term
             : log.entries[(log.back + log.size - 1) % log.size].term;
}

void RaftConsensus::RefreshIfRoleChanged() {
  if (closing_) return;
  raft_id leader = 0;
  const char* address = nullptr;
  raft_leader(&raft_, &leader, &address);
  const Role role = FromRaftState(raft_state(&raft_));
  {
    absl::MutexLock lock(&status_mu_);
    if (status_.role == role && status_.leader_id == leader) return;
  }
  RefreshStatus();
}

void RaftConsensus::ReceiveSnapshot(struct raft_message* message) {
  // libraft is storing a snapshot (its own, or one handed over below,
  // whose Restore needs the fetched copy untouched): it ignores this one
  // (the leader sends it again), and no new fetch may start.
  if (StoringSnapshot()) {
    io_.recv(&io_.io, message);
    return;
  }
  const struct raft_buffer& data = message->install_snapshot.data;
  const absl::string_view descriptor(static_cast<const char*>(data.base),
                                     data.len);
  if (machine_->PrepareSnapshot(descriptor)) {
    DropHeldSnapshot();
    io_.recv(&io_.io, message);
    return;
  }
  DropHeldSnapshot();
  held_ = std::make_unique<HeldSnapshot>();
  held_->message = *message;  // owns its conf and data from here
  held_->address =
      message->server_address != nullptr ? message->server_address : "";
}

void RaftConsensus::MaybeDeliverHeldSnapshot() {
  if (held_ == nullptr || closing_ || StoringSnapshot()) return;
  const struct raft_buffer& data = held_->message.install_snapshot.data;
  if (!machine_->PrepareSnapshot(
          absl::string_view(static_cast<const char*>(data.base), data.len))) {
    return;
  }
  std::unique_ptr<HeldSnapshot> held = std::move(held_);
  held->message.server_address = held->address.c_str();
  // libraft owns the message's conf and data from here on.
  io_.recv(&io_.io, &held->message);
}

void RaftConsensus::DropHeldSnapshot() {
  if (held_ == nullptr) return;
  raft_configuration_close(&held_->message.install_snapshot.conf);
  raft_free(held_->message.install_snapshot.data.base);
  held_.reset();
}

void RaftConsensus::RunPosted() {
  std::vector<absl::AnyInvocable<void() &&>> posted;
  {
    absl::MutexLock lock(&mu_);
    posted.swap(posted_);
  }
  // After a failed start, libraft is closed: the work is dropped.
  if (!running_ || closing_) return;
  for (auto& fn : posted) std::move(fn)();
  RefreshStatus();
}

void RaftConsensus::Close() {
  closing_ = true;
  loop_->Remove(this);
  raft_close(&raft_, &RaftConsensus::OnRaftClosed);
}

void RaftConsensus::AbortStart(Opened opened) {
  // Notified from a later turn of the loop, once libraft's and the
  // transport's callbacks (still on the stack here) have returned.
  auto notify_closed = [this] { loop_->Post([this] { closed_.Notify(); }); };
  switch (opened) {
    case Opened::kNothing:
      closed_.Notify();
      return;
    case Opened::kTransport:
      if (uv_inited_) raft_uv_close(&io_.io);
      transport_->CloseUnused(notify_closed);
      return;
    case Opened::kEngine:
      closing_ = true;
      raft_close(&raft_, &RaftConsensus::OnRaftClosed);
      return;
  }
}

void RaftConsensus::OnRaftClosed(struct raft* r) {
  auto* self = static_cast<RaftConsensus*>(r->data);
  self->DropHeldSnapshot();
  raft_uv_close(&self->io_.io);
  if (self->running_) self->PublishClosed();
  self->loop_->Post([self] { self->closed_.Notify(); });
}

void RaftConsensus::PublishClosed() {
  ConsensusStatus status;
  {
    absl::MutexLock lock(&status_mu_);
    status_.role = Role::kUnavailable;
    status_.leader_id = 0;
    status = status_;
  }
  machine_->Tick(status);
}

void RaftConsensus::NoTick(struct raft_io*) {}

void RaftConsensus::OnTick(uint64_t tick) {
  if (closing_) return;
  // A leader's tick sends its heartbeats: every raft_tick_every_ ticks, on
  // the same ticks as every other leader of the loop, so that they leave
  // together. Anyone else's tick only checks its election timer: every tick,
  // which notices a lost leader sooner and spreads the followers' elections
  // over the loop's ticks rather than bunching them on one in ten (where
  // two followers of one group more often stand at once and split the vote).
  const bool leader = raft_state(&raft_) == RAFT_LEADER;
  if (io_.tick != nullptr && (!leader || tick % raft_tick_every_ == 0)) {
    io_.tick(&io_.io);
  }
  MaybeDeliverHeldSnapshot();
  RefreshStatus();
}

void RaftConsensus::RefreshStatus() {
  ConsensusStatus status;
  status.id = options_.id;
  status.role =
      closing_ ? Role::kUnavailable : FromRaftState(raft_state(&raft_));
  status.term = raft_.current_term;
  if (!closing_) {
    raft_id leader = 0;
    const char* address = nullptr;
    raft_leader(&raft_, &leader, &address);
    status.leader_id = leader;
  }
  status.commit_index = raft_.commit_index;
  status.applied_index = raft_last_applied(&raft_);
  status.last_index = raft_last_index(&raft_);
  peer_group_->set_term(raft_.current_term);
  status.last_log_term = LastLogTerm();
  const bool leader = status.role == Role::kLeader;
  std::vector<uint64_t> member_ids;
  for (unsigned i = 0; i < raft_.configuration.n; ++i) {
    const struct raft_server& server = raft_.configuration.servers[i];
    Member member;
    member.id = server.id;
    member.raft_address = server.address != nullptr ? server.address : "";
    member.role = FromRaftRole(server.role);
    if (leader && raft_.leader_state.progress != nullptr) {
      member.match_index = raft_.leader_state.progress[i].match_index;
      member.recently_heard = raft_.leader_state.progress[i].recent_recv;
    }
    member_ids.push_back(member.id);
    status.members.push_back(std::move(member));
  }
  peer_group_->SetMembers(std::move(member_ids));
  if (status.leader_id != 0 && status.leader_id != last_leader_id_) {
    ++leader_changes_;
  }
  last_leader_id_ = status.leader_id;
  status.leader_changes = leader_changes_;
  status.log_appends = log_appends_.load();
  status.log_appended_entries = log_appended_entries_.load();
  status.snapshot_threshold = raft_.snapshot.threshold;
  status.snapshot_trailing = raft_.snapshot.trailing;
  status.ticks = ++ticks_;
  {
    absl::MutexLock lock(&status_mu_);
    status_ = status;
  }
  machine_->Tick(status);
}

}  // namespace dedup::raft_internal
