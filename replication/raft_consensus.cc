#include "replication/raft_consensus.h"

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "replication/log_budget.h"
#include "replication/peer_transport.h"
#include "replication/raft_codes.h"
#include "replication/raft_dir_repair.h"
#include "storage/durable_dir.h"

namespace dedup {

namespace {

constexpr uint64_t kTickMs = 10;
// Exit code of a node that met a damaged log entry (see FsmApply).
constexpr int kExitDamagedEntry = exit_code::kDamagedLogEntry;

using Done = absl::AnyInvocable<void(absl::Status) &&>;

class RaftConsensus : public Consensus {
 public:
  RaftConsensus(const RaftOptions& options, StateMachine* machine)
      : options_(options),
        machine_(machine),
        log_budget_(options.log_budget_bytes, options.snapshot_threshold,
                    options.snapshot_trailing) {}

  ~RaftConsensus() override { Stop(); }

  absl::Status Start() {
    // libraft syncs the files it makes in the dir, never the dir's name.
    if (absl::Status s = CreateDirectoriesDurably(options_.dir); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create raft dir: ", s.message()));
    }
    // Files an interrupted truncation or bootstrap left that libraft would
    // refuse or misread (raft_dir_repair.h).
    if (absl::Status s =
            RepairRaftDir(options_.dir, !options_.bootstrap.empty());
        !s.ok()) {
      return absl::InternalError(
          absl::StrCat("cannot repair raft dir: ", s.message()));
    }
    if (int rv = uv_loop_init(&loop_); rv != 0) {
      return absl::InternalError(
          absl::StrCat("uv_loop_init: ", uv_strerror(rv)));
    }
    if (absl::Status s = StartTransport(); !s.ok()) return s;
    if (int rv = raft_uv_init(&io_.io, &loop_, options_.dir.c_str(),
                              transport_->raft());
        rv != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("raft log in ", options_.dir, ": ", io_.io.errmsg));
    }
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
      return absl::UnavailableError(
          absl::StrCat("raft init: ", raft_errmsg(&raft_)));
    }
    raft_.data = this;
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
    // See every message before libraft does (see ReceiveSnapshot).
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
    uv_async_init(&loop_, &async_, &RaftConsensus::OnAsync);
    async_.data = this;
    uv_timer_init(&loop_, &timer_);
    timer_.data = this;
    uv_timer_start(&timer_, &RaftConsensus::OnTimer, kTickMs, kTickMs);
    RefreshStatus();
    thread_ = std::thread([this] {
      loop_io = &io_;
      uv_run(&loop_, UV_RUN_DEFAULT);
    });
    return absl::OkStatus();
  }

  // Appends the configuration {this node: voter} to the log on disk.
  int ForceSoleVoter() {
    struct raft_configuration configuration;
    raft_configuration_init(&configuration);
    int rv = raft_configuration_add(&configuration, options_.id,
                                    options_.force_sole_voter_at.c_str(),
                                    RAFT_VOTER);
    if (rv == 0) rv = raft_recover(&raft_, &configuration);
    raft_configuration_close(&configuration);
    return rv;
  }

  absl::Status Propose(std::string entry, Done done) override {
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

  void Post(absl::AnyInvocable<void() &&> fn) override {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      posted_.push_back(std::move(fn));
    }
    uv_async_send(&async_);
  }

  ConsensusStatus Status() const override {
    absl::MutexLock lock(&status_mu_);
    return status_;
  }

  absl::Status AddMember(uint64_t id, const std::string& raft_address,
                         Done done) override {
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

  absl::Status RemoveMember(uint64_t id, Done done) override {
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

  absl::Status TransferLeadership(uint64_t id, Done done) override {
    auto* transfer = new TransferRequest{{}, this, std::move(done)};
    transfer->req.data = transfer;
    const int rv = raft_transfer(&raft_, &transfer->req, id,
                                 &RaftConsensus::OnTransferred);
    if (rv != 0) {
      delete transfer;
      return RaftError(rv, "transfer leadership", &raft_);
    }
    return absl::OkStatus();
  }

  void Stop() override {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    // A failed Start leaves libraft's memory to the exiting process.
    if (!thread_.joinable()) return;
    uv_async_send(&async_);
    thread_.join();
    uv_loop_close(&loop_);
  }

 private:
  // The peer plane (the given one, or a plaintext one of our own) bound to
  // the Raft address, and libraft's transport over it.
  absl::Status StartTransport() {
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
    transport_ = std::make_unique<PeerTransport>(
        &loop_, plane, options_.group_id, peer_group_);
    if (int rv = transport_->Init(); rv != 0) {
      return absl::InternalError(
          absl::StrCat("raft transport: ", uv_strerror(rv)));
    }
    return absl::OkStatus();
  }

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
                      void** result) {
    RaftConsensus* self = Of(fsm);
    *result = nullptr;
    // libraft 0.15 does not pass the index: it applies entries strictly in
    // order and sets last_applied only after this returns.
    const uint64_t index = raft_last_applied(&self->raft_) + 1;
    absl::Status s = self->machine_->Apply(
        index,
        absl::string_view(static_cast<const char*>(buf->base), buf->len));
    if (absl::IsDataLoss(s)) {
      // The entry's bytes are damaged in memory (the log on disk is
      // checksummed by libraft): applying anything more would diverge, and
      // waiting would stall. Stop; a restart reloads the log from disk.
      std::string head;
      for (size_t i = 0; i < buf->len && i < 24; ++i) {
        absl::StrAppend(
            &head, static_cast<int>(static_cast<unsigned char*>(buf->base)[i]),
            " ");
      }
      // LogError flushes: the line is out before _exit.
      LogError("FATAL: log entry ", index, " (", buf->len, " bytes: ", head,
               "...) cannot be applied: ", s.message(),
               "; stopping (restart the node)");
      _exit(kExitDamagedEntry);
    }
    if (!s.ok()) {
      StopOnStorageFailure(
          absl::StrCat("cannot apply log entry ", index, ": ", s.message()));
    }
    self->FitLogToBudget(buf->len);
    self->peer_group_->set_term(self->raft_.current_term);
    return 0;
  }

  // Consensus thread: libraft reads both counts after each apply.
  void FitLogToBudget(size_t entry_bytes) {
    log_budget_.Observe(entry_bytes);
    if (log_budget_.threshold() != raft_.snapshot.threshold) {
      raft_set_snapshot_threshold(&raft_, log_budget_.threshold());
    }
    if (log_budget_.trailing() != raft_.snapshot.trailing) {
      raft_set_snapshot_trailing(&raft_, log_budget_.trailing());
    }
  }

  static int FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                         unsigned* n_bufs) {
    absl::StatusOr<std::string> descriptor = Of(fsm)->machine_->Snapshot();
    if (!descriptor.ok()) {
      LogWarning("snapshot not taken: ", descriptor.status().message());
      return RAFT_BUSY;  // libraft tries again later
    }
    auto* array = static_cast<struct raft_buffer*>(
        raft_malloc(sizeof(struct raft_buffer)));
    void* data = raft_malloc(descriptor->size());
    if (array == nullptr || data == nullptr) {
      raft_free(array);
      raft_free(data);
      return RAFT_NOMEM;
    }
    std::memcpy(data, descriptor->data(), descriptor->size());
    array[0].base = data;
    array[0].len = descriptor->size();
    *bufs = array;
    *n_bufs = 1;
    return 0;
  }

  static int FsmSnapshotFinalize(struct raft_fsm*, struct raft_buffer* bufs[],
                                 unsigned* n_bufs) {
    if (*bufs != nullptr) {
      for (unsigned i = 0; i < *n_bufs; ++i) raft_free((*bufs)[i].base);
      raft_free(*bufs);
    }
    *bufs = nullptr;
    *n_bufs = 0;
    return 0;
  }

  static int FsmRestore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    absl::Status s = Of(fsm)->machine_->Restore(
        absl::string_view(static_cast<const char*>(buf->base), buf->len));
    if (!s.ok()) {
      LogError("cannot restore snapshot: ", s.message());
      return RAFT_IOERR;
    }
    // On success the buffer is ours to free.
    raft_free(buf->base);
    return 0;
  }

  static int CountingAppend(struct raft_io* io, struct raft_io_append* req,
                            const struct raft_entry entries[], unsigned n,
                            raft_io_append_cb cb) {
    auto* counted = reinterpret_cast<CountedIo*>(io);
    counted->self->log_appends_.fetch_add(1);
    counted->self->log_appended_entries_.fetch_add(n);
    counted->callbacks[req] = cb;
    const int rv = counted->append(io, req, entries, n, &AppendDone);
    if (rv != 0) counted->callbacks.erase(req);
    if (rv != 0 && rv != RAFT_CANCELED && !counted->self->closing_) {
      StopOnStorageFailure(absl::StrCat(
          "cannot append ", n,
          " entries to the Raft log: ", AppendError(rv, counted->io.errmsg)));
    }
    return rv;
  }

  // The backend's completion of CountingAppend's request: a failure ends
  // the process before libraft sees it (see StopOnStorageFailure).
  static void AppendDone(struct raft_io_append* req, int status) {
    CountedIo* counted = loop_io;
    auto it = counted->callbacks.find(req);
    const raft_io_append_cb cb = it->second;
    counted->callbacks.erase(it);
    // (Canceled: the backend is closing, as at a clean stop.)
    if (status != 0 && status != RAFT_CANCELED && !counted->self->closing_) {
      StopOnStorageFailure(
          absl::StrCat("a Raft log append failed: ",
                       AppendError(status, counted->io.errmsg)));
    }
    cb(req, status);
  }

  static int StartIo(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick,
                     raft_io_recv_cb recv) {
    auto* counted = reinterpret_cast<CountedIo*>(io);
    counted->recv = recv;
    return counted->start(io, msecs, tick, &RaftConsensus::Receive);
  }

  static void Receive(struct raft_io* io, struct raft_message* message) {
    auto* counted = reinterpret_cast<CountedIo*>(io);
    if (message->type == RAFT_IO_INSTALL_SNAPSHOT && !counted->self->closing_) {
      counted->self->ReceiveSnapshot(message);
      return;
    }
    counted->recv(io, message);
  }

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
  void ReceiveSnapshot(struct raft_message* message) {
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

  // Consensus thread, each tick: hands the held snapshot to libraft once
  // its state is here.
  void MaybeDeliverHeldSnapshot() {
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

  // A snapshot_put of libraft's is in flight (r->snapshot.put.data is set
  // from the put's start to its callback).
  bool StoringSnapshot() const { return raft_.snapshot.put.data != nullptr; }

  void DropHeldSnapshot() {
    if (held_ == nullptr) return;
    raft_configuration_close(&held_->message.install_snapshot.conf);
    raft_free(held_->message.install_snapshot.data.base);
    held_.reset();
  }

  static void OnApplied(struct raft_apply* req, int status, void*) {
    auto* request = static_cast<ApplyRequest*>(req->data);
    std::move(request->done)(
        status == 0 ? absl::OkStatus()
                    : RaftError(status, "entry not applied", nullptr));
    delete request;
  }

  static void OnAdded(struct raft_change* req, int status) {
    auto* change = static_cast<ChangeRequest*>(req->data);
    RaftConsensus* self = change->self;
    if (status != 0) {
      std::move(change->done)(RaftError(status, "add member", nullptr));
      delete change;
      return;
    }
    const int rv = raft_assign(&self->raft_, &change->req, change->id,
                               RAFT_VOTER, &RaftConsensus::OnChanged);
    if (rv != 0) {
      std::move(change->done)(RaftError(rv, "promote member", &self->raft_));
      delete change;
    }
  }

  static void OnChanged(struct raft_change* req, int status) {
    auto* change = static_cast<ChangeRequest*>(req->data);
    std::move(change->done)(
        status == 0 ? absl::OkStatus()
                    : RaftError(status, "membership change", nullptr));
    delete change;
  }

  static void OnTransferred(struct raft_transfer* req) {
    auto* transfer = static_cast<TransferRequest*>(req->data);
    RaftConsensus* self = transfer->self;
    raft_id leader = 0;
    const char* address = nullptr;
    raft_leader(&self->raft_, &leader, &address);
    // Callers read the new leader from Status() next.
    self->RefreshStatus();
    std::move(transfer->done)(
        leader != 0 && leader != self->options_.id
            ? absl::OkStatus()
            : absl::DeadlineExceededError(
                  "leadership was not transferred within the election "
                  "timeout"));
    delete transfer;
  }

  static void OnAsync(uv_async_t* handle) {
    auto* self = static_cast<RaftConsensus*>(handle->data);
    std::vector<absl::AnyInvocable<void() &&>> posted;
    bool stopping;
    {
      absl::MutexLock lock(&self->mu_);
      posted.swap(self->posted_);
      stopping = self->stopping_;
    }
    for (auto& fn : posted) std::move(fn)();
    if (stopping && !self->closing_) {
      self->closing_ = true;
      uv_timer_stop(&self->timer_);
      raft_close(&self->raft_, &RaftConsensus::OnRaftClosed);
    } else {
      self->RefreshStatus();
    }
  }

  static void OnRaftClosed(struct raft* r) {
    auto* self = static_cast<RaftConsensus*>(r->data);
    self->DropHeldSnapshot();
    raft_uv_close(&self->io_.io);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->timer_), nullptr);
    self->PublishClosed();
  }

  // Once libraft has closed, its configuration and log are freed (reading
  // them was a use after free, caught by ASan): the last status stays,
  // marked unavailable with no leader.
  void PublishClosed() {
    ConsensusStatus status;
    {
      absl::MutexLock lock(&status_mu_);
      status_.role = Role::kUnavailable;
      status_.leader_id = 0;
      status = status_;
    }
    machine_->Tick(status);
  }

  static void OnTimer(uv_timer_t* handle) {
    auto* self = static_cast<RaftConsensus*>(handle->data);
    self->MaybeDeliverHeldSnapshot();
    self->RefreshStatus();
  }

  // Consensus thread (or the starting thread before the loop runs).
  void RefreshStatus() {
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
    const struct raft_log& log = raft_.log;
    status.last_log_term =
        log.front == log.back
            ? log.snapshot.last_term
            : log.entries[(log.back + log.size - 1) % log.size].term;
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
    {
      absl::MutexLock lock(&status_mu_);
      status_ = status;
    }
    machine_->Tick(status);
  }

  const RaftOptions options_;
  StateMachine* const machine_;
  LogBudget log_budget_;  // consensus thread

  uv_loop_t loop_;
  uv_async_t async_;
  uv_timer_t timer_;
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
    // The backend's start, and libraft's receive callback (the backend is
    // given Receive instead).
    int (*start)(struct raft_io*, unsigned, raft_io_tick_cb,
                 raft_io_recv_cb) = nullptr;
    raft_io_recv_cb recv = nullptr;
  };
  CountedIo io_{};
  // The io_ of the loop running on this thread (its callbacks carry no
  // pointer of ours).
  static thread_local CountedIo* loop_io;
  std::atomic<uint64_t> log_appends_{0};
  std::atomic<uint64_t> log_appended_entries_{0};
  // A leader's InstallSnapshot waiting for its state (consensus thread).
  struct HeldSnapshot {
    struct raft_message message;
    std::string address;  // the sender's, which the transport may free
  };
  std::unique_ptr<HeldSnapshot> held_;
  struct raft_fsm fsm_ {};
  struct raft raft_ {};
  bool closing_ = false;  // consensus thread
  uint64_t last_leader_id_ = 0;
  uint64_t leader_changes_ = 0;
  std::thread thread_;

  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  mutable absl::Mutex status_mu_;
  ConsensusStatus status_ ABSL_GUARDED_BY(status_mu_);
};

thread_local RaftConsensus::CountedIo* RaftConsensus::loop_io = nullptr;

}  // namespace

absl::StatusOr<std::unique_ptr<Consensus>> StartRaft(const RaftOptions& options,
                                                     StateMachine* machine) {
  if (options.id == 0)
    return absl::InvalidArgumentError("node id: must be > 0");
  auto consensus = std::make_unique<RaftConsensus>(options, machine);
  if (absl::Status s = consensus->Start(); !s.ok()) return s;
  return consensus;
}

}  // namespace dedup
