#include "replication/raft_consensus.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/raft_codes.h"
#include "replication/raft_consensus_impl.h"
#include "replication/raft_dir_repair.h"
#include "replication/raft_trace.h"
#include "storage/durable_dir.h"

namespace dedup {
namespace raft_internal {
absl::Status RaftConsensus::Start() {
  // libraft syncs the files it makes in the dir, never the dir's name.
  if (absl::Status s = CreateDirectoriesDurably(options_.dir); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create raft dir: ", s.message()));
  }
  // Files an interrupted truncation or bootstrap left that libraft would
  // refuse or misread (raft_dir_repair.h).
  if (absl::Status s = RepairRaftDir(options_.dir, !options_.bootstrap.empty());
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot repair raft dir: ", s.message()));
  }
  loop_ = options_.loop;
  if (loop_ == nullptr) {
    absl::StatusOr<std::shared_ptr<RaftLoop>> own = RaftLoop::Start();
    if (!own.ok()) return own.status();
    loop_ = *std::move(own);
  }
  const unsigned tick_ms = loop_->tick_ms();
  raft_tick_every_ =
      std::max(1u, (options_.heartbeat_timeout_ms + tick_ms - 1) / tick_ms);
  absl::Status status = absl::InternalError("the Raft loop is ending");
  loop_->RunAndWait([this, &status] { status = StartOnLoop(); });
  if (status.ok()) {
    started_ = true;
    return status;
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  closed_.WaitForNotification();
  // What was posted before the failure ran (or was dropped) before this.
  loop_->RunAndWait([] {});
  return status;
}

absl::Status RaftConsensus::StartOnLoop() {
  if (absl::Status s = StartTransport(); !s.ok()) {
    AbortStart(Opened::kNothing);
    return s;
  }
  if (int rv = raft_uv_init(&io_.io, loop_->loop(), options_.dir.c_str(),
                            transport_->raft());
      rv != 0) {
    absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("raft log in ", options_.dir, ": ", io_.io.errmsg));
    AbortStart(Opened::kTransport);
    return s;
  }
  uv_inited_ = true;
  raft_uv_set_tracer(&io_.io, RaftLogTracer());
  // Version 2: Debian's raft_uv has no async_work, which asynchronous
  // snapshots (version 3) need. Snapshot() is cheap instead (a WAL fsync).
  fsm_.version = 2;
  fsm_.data = this;
  fsm_.apply = &RaftConsensus::FsmApply;
  fsm_.snapshot = &RaftConsensus::FsmSnapshot;
  fsm_.restore = &RaftConsensus::FsmRestore;
  fsm_.snapshot_finalize = &RaftConsensus::FsmSnapshotFinalize;
  if (int rv = raft_init(&raft_, &io_.io, &fsm_, options_.id,
                         options_.raft_address.c_str());
      rv != 0) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("raft init: ", raft_errmsg(&raft_)));
    AbortStart(Opened::kTransport);
    return s;
  }
  if (absl::Status s = StartEngine(); !s.ok()) {
    AbortStart(Opened::kEngine);
    return s;
  }
  running_ = true;
  loop_->Add(this);
  RefreshStatus();
  return absl::OkStatus();
}

absl::Status RaftConsensus::StartEngine() {
  raft_.data = this;
  raft_.tracer = RaftLogTracer();
  raft_set_election_timeout(&raft_, options_.election_timeout_ms);
  raft_set_heartbeat_timeout(&raft_, options_.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&raft_, options_.snapshot_threshold);
  raft_set_snapshot_trailing(&raft_, options_.snapshot_trailing);
  // A node cut off from the others must not disrupt the group with
  // elections it cannot win when it comes back.
  raft_set_pre_vote(&raft_, true);
  raft_uv_set_connect_retry_delay(&io_.io, 100);
  // Count appends on their way to the backend (see ConsensusStatus).
  io_.self = this;
  io_.append = io_.io.append;
  io_.io.append = &RaftConsensus::CountingAppend;
  // See every message before libraft does (see ReceiveSnapshot), and tick
  // libraft from the loop's timer (see OnTick).
  io_.start = io_.io.start;
  io_.io.start = &RaftConsensus::StartIo;
  if (!options_.bootstrap.empty()) {
    struct raft_configuration configuration;
    raft_configuration_init(&configuration);
    int rv = 0;
    for (const Member& member : options_.bootstrap) {
      rv = raft_configuration_add(&configuration, member.id,
                                  member.raft_address.c_str(),
                                  ToRaftRole(member.role));
      if (rv != 0) break;
    }
    if (rv == 0) rv = raft_bootstrap(&raft_, &configuration);
    raft_configuration_close(&configuration);
    // Not pristine: the group was founded before; its log says who is in.
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
      return RaftError(rv, "raft bootstrap", &raft_);
    }
  }
  if (!options_.force_sole_voter_at.empty()) {
    if (int rv = ForceSoleVoter(); rv != 0) {
      return RaftError(rv, "raft recover", &raft_);
    }
  }
  if (int rv = raft_start(&raft_); rv != 0) {
    return RaftError(rv, "raft start", &raft_);
  }
  return absl::OkStatus();
}

int RaftConsensus::ForceSoleVoter() {
  struct raft_configuration configuration;
  raft_configuration_init(&configuration);
  int rv =
      raft_configuration_add(&configuration, options_.id,
                             options_.force_sole_voter_at.c_str(), RAFT_VOTER);
  if (rv == 0) rv = raft_recover(&raft_, &configuration);
  raft_configuration_close(&configuration);
  return rv;
}

absl::Status RaftConsensus::Propose(std::string entry, Done done) {
  struct raft_buffer buf;
  buf.len = entry.size();
  buf.base = raft_malloc(buf.len);
  if (buf.base == nullptr) return absl::ResourceExhaustedError("raft_malloc");
  std::memcpy(buf.base, entry.data(), buf.len);
  auto* request = new ApplyRequest{{}, std::move(done)};
  request->req.data = request;
  const int rv =
      raft_apply(&raft_, &request->req, &buf, 1, &RaftConsensus::OnApplied);
  if (rv != 0) {
    raft_free(buf.base);
    delete request;
    return RaftError(rv, "propose", &raft_);
  }
  return absl::OkStatus();
}

void RaftConsensus::Post(absl::AnyInvocable<void() &&> fn) {
  // Queued on the loop under mu_: whatever passed this check is on the
  // loop's queue before Stop queues Close.
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const bool first = posted_.empty();
  posted_.push_back(std::move(fn));
  if (first) loop_->Post([this] { RunPosted(); });
}

ConsensusStatus RaftConsensus::Status() const {
  absl::MutexLock lock(&status_mu_);
  return status_;
}

absl::Status RaftConsensus::AddMember(uint64_t id,
                                      const std::string& raft_address,
                                      Done done) {
  auto* change = new ChangeRequest{{}, this, id, std::move(done)};
  change->req.data = change;
  // Added as a spare first, then promoted: libraft makes the promotion
  // wait until the newcomer has caught up with the log.
  const int rv = raft_add(&raft_, &change->req, id, raft_address.c_str(),
                          &RaftConsensus::OnAdded);
  if (rv != 0) {
    delete change;
    return RaftError(rv, "add member", &raft_);
  }
  return absl::OkStatus();
}

absl::Status RaftConsensus::RemoveMember(uint64_t id, Done done) {
  auto* change = new ChangeRequest{{}, this, id, std::move(done)};
  change->req.data = change;
  const int rv =
      raft_remove(&raft_, &change->req, id, &RaftConsensus::OnChanged);
  if (rv != 0) {
    delete change;
    return RaftError(rv, "remove member", &raft_);
  }
  return absl::OkStatus();
}

absl::Status RaftConsensus::TransferLeadership(uint64_t id, Done done) {
  auto* transfer = new TransferRequest{{}, this, std::move(done)};
  transfer->req.data = transfer;
  const int rv =
      raft_transfer(&raft_, &transfer->req, id, &RaftConsensus::OnTransferred);
  if (rv != 0) {
    delete transfer;
    return RaftError(rv, "transfer leadership", &raft_);
  }
  return absl::OkStatus();
}

void RaftConsensus::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // A failed Start closed what it had opened.
  if (!started_) return;
  loop_->Post([this] { Close(); });
  closed_.WaitForNotification();
}

absl::Status RaftConsensus::StartTransport() {
  std::shared_ptr<PeerPlane> plane = options_.peer_plane;
  if (plane == nullptr) {
    PeerPlaneOptions plane_options;
    plane_options.listen_address = options_.raft_address;
    // A lagging follower gets its whole backlog in one message.
    plane_options.frame_limits.max_message_bytes =
        options_.log_budget_bytes + (64 << 20);
    absl::StatusOr<std::shared_ptr<PeerPlane>> created =
        PeerPlane::Create(std::move(plane_options));
    if (!created.ok()) return created.status();
    plane = *std::move(created);
  }
  if (absl::Status s = plane->Listen(); !s.ok()) return s;
  transport_ = std::make_unique<PeerTransport>(loop_->loop(), plane,
                                               options_.group_id, peer_group_);
  if (int rv = transport_->Init(); rv != 0) {
    return absl::InternalError(
        absl::StrCat("raft transport: ", uv_strerror(rv)));
  }
  return absl::OkStatus();
}

}  // namespace raft_internal

absl::StatusOr<std::unique_ptr<Consensus>> StartRaft(const RaftOptions& options,
                                                     StateMachine* machine) {
  if (options.id == 0)
    return absl::InvalidArgumentError("node id: must be > 0");
  auto consensus =
      std::make_unique<raft_internal::RaftConsensus>(options, machine);
  if (absl::Status s = consensus->Start(); !s.ok()) return s;
  return consensus;
}

}  // namespace dedup
