// An operation queued on a member of a replicated group, with whoever waits
// for its answer, and the outcome-unknown error. Internal to
// replicated_store.cc (split out to keep that file about the flow).
//
// Thread safety: a PendingOp is owned by one thread at a time (moved from
// the caller to the queue to the consensus thread).
#ifndef DEDUP_REPLICATION_PENDING_OP_H_
#define DEDUP_REPLICATION_PENDING_OP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "storage/authority.h"
#include "storage/log_entry.h"
#include "storage/record.h"
#include "storage/replicated_state.h"
#include "storage/storage_key.h"
#include "storage/store.h"

namespace dedup {

// One queued operation and whoever waits for its answer (one callback set).
struct PendingOp {
  LogOp op;
  int64_t wait_deadline_ms = 0;  // Begin: park until then while IN_USE
  bool waited = false;
  StoreCallback<BeginResult> begin_done;
  // Begin of a batch: its answer's share of the batch's stored results
  // (see Store::BeginCall); null: unbounded.
  ResultBudget* result_budget = nullptr;
  StoreCallback<FencedDecision> fenced_done;
  StoreCallback<std::optional<Record>> get_done;
  StoreCallback<bool> forget_done;
  StoreCallback<bool> member_done;  // kSetMember

  // An operation of `type` on (ns, key); the caller sets its parameters
  // and callback.
  static PendingOp For(OpType type, absl::string_view ns,
                       absl::string_view key) {
    PendingOp p;
    p.op.type = type;
    p.op.skey = EncodeStorageKey(ns, key);
    return p;
  }

  size_t bytes() const {
    return 64 + op.skey.size() + op.begin.args_hash.size() +
           op.begin.owner.size() + op.complete.result.size() +
           op.checkpoint.step.size() + op.checkpoint.data.size();
  }

  // Hands the applied operation's answer to whoever waits for it: an error
  // or the decision its type calls for. A Begin is answered as decided
  // (parking an IN_USE one is the store's choice, made before); a DUPLICATE
  // whose result does not fit the batch's budget is refused instead
  // (ResultBudgetExceeded).
  void Deliver(OpAnswer answer) &&;

  void Fail(const absl::Status& status) && {
    if (begin_done) std::move(begin_done)(status);
    if (fenced_done) std::move(fenced_done)(status);
    if (get_done) std::move(get_done)(status);
    if (forget_done) std::move(forget_done)(status);
    if (member_done) std::move(member_done)(status);
  }
};

inline absl::Status UnknownOutcome(absl::string_view why) {
  absl::Status status = absl::AbortedError(absl::StrCat(
      "outcome unknown: ", why,
      "; the operation may or may not take effect. Retry a Begin with the "
      "same owner, a Complete with the same fence and result"));
  status.SetPayload(kOutcomeUnknownPayload, absl::Cord("unknown"));
  return status;
}

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PENDING_OP_H_
