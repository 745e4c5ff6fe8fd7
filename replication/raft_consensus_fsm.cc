// libraft's state machine callbacks (apply, snapshot, restore) and the
// completions of proposals and membership changes.
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "replication/raft_codes.h"
#include "replication/raft_consensus_impl.h"

namespace dedup::raft_internal {
namespace {

// Exit code of a node that met a damaged log entry (see FsmApply).
constexpr int kExitDamagedEntry = exit_code::kDamagedLogEntry;

}  // namespace

int RaftConsensus::FsmApply(struct raft_fsm* fsm, const struct raft_buffer* buf,
                            void** result) {
  RaftConsensus* self = Of(fsm);
  *result = nullptr;
  // libraft 0.15 does not pass the index: it applies entries strictly in
  // order and sets last_applied only after this returns.
  const uint64_t index = raft_last_applied(&self->raft_) + 1;
  absl::Status s = self->machine_->Apply(
      index, absl::string_view(static_cast<const char*>(buf->base), buf->len));
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

void RaftConsensus::FitLogToBudget(size_t entry_bytes) {
  log_budget_.Observe(entry_bytes);
  if (log_budget_.threshold() != raft_.snapshot.threshold) {
    raft_set_snapshot_threshold(&raft_, log_budget_.threshold());
  }
  if (log_budget_.trailing() != raft_.snapshot.trailing) {
    raft_set_snapshot_trailing(&raft_, log_budget_.trailing());
  }
}

int RaftConsensus::FsmSnapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                               unsigned* n_bufs) {
  absl::StatusOr<std::string> descriptor = Of(fsm)->machine_->Snapshot();
  if (!descriptor.ok()) {
    LogWarning("snapshot not taken: ", descriptor.status().message());
    return RAFT_BUSY;  // libraft tries again later
  }
  auto* array =
      static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
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

int RaftConsensus::FsmSnapshotFinalize(struct raft_fsm*,
                                       struct raft_buffer* bufs[],
                                       unsigned* n_bufs) {
  if (*bufs != nullptr) {
    for (unsigned i = 0; i < *n_bufs; ++i) raft_free((*bufs)[i].base);
    raft_free(*bufs);
  }
  *bufs = nullptr;
  *n_bufs = 0;
  return 0;
}

int RaftConsensus::FsmRestore(struct raft_fsm* fsm, struct raft_buffer* buf) {
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

void RaftConsensus::OnApplied(struct raft_apply* req, int status, void*) {
  auto* request = static_cast<ApplyRequest*>(req->data);
  std::move(request->done)(
      status == 0 ? absl::OkStatus()
                  : RaftError(status, "entry not applied", nullptr));
  delete request;
}

void RaftConsensus::OnAdded(struct raft_change* req, int status) {
  auto* change = static_cast<ChangeRequest*>(req->data);
  RaftConsensus* self = change->self;
  if (status != 0) {
    std::move(change->done)(RaftError(status, "add member", nullptr));
    delete change;
    return;
  }
  const int rv = raft_assign(&self->raft_, &change->req, change->id, RAFT_VOTER,
                             &RaftConsensus::OnChanged);
  if (rv != 0) {
    std::move(change->done)(RaftError(rv, "promote member", &self->raft_));
    delete change;
  }
}

void RaftConsensus::OnChanged(struct raft_change* req, int status) {
  auto* change = static_cast<ChangeRequest*>(req->data);
  // Callers read the new configuration from Status() next: a mover that
  // saw the promoted member still as a spare removed it again.
  if (status == 0) change->self->RefreshStatus();
  std::move(change->done)(
      status == 0 ? absl::OkStatus()
                  : RaftError(status, "membership change", nullptr));
  delete change;
}

void RaftConsensus::OnTransferred(struct raft_transfer* req) {
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
  // Not freed yet: its TimeoutNow send may still be in the transport.
  constexpr size_t kKeptTransfers = 64;
  self->ended_transfers_.emplace_back(transfer);
  if (self->ended_transfers_.size() > kKeptTransfers) {
    self->ended_transfers_.pop_front();
  }
}

}  // namespace dedup::raft_internal
