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
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "storage/authority.h"
#include "storage/log_entry.h"
#include "storage/record.h"
#include "storage/replicated_state.h"
#include "storage/store.h"

namespace dedup {

// Whoever waits for an operation's answer, by the answer's type (see
// OpAnswer): Begin; Complete, Release, Renew and Checkpoint; Get; Forget,
// SetMember and SetShardMap.
using OpCallback =
    std::variant<StoreCallback<BeginResult>, StoreCallback<FencedDecision>,
                 StoreCallback<std::optional<Record>>, StoreCallback<bool>>;

// One queued operation and whoever waits for its answer.
struct PendingOp {
  LogOp op;
  OpCallback done;
  int64_t wait_deadline_ms = 0;  // Begin: park until then while IN_USE
  bool waited = false;
  // Begin of a batch: its answer's share of the batch's stored results
  // (see Store::BeginCall), taken when its entry applies; null: unbounded.
  ResultBudget* result_budget = nullptr;

  // `op`, answered through `done` (whose answer type must be the one `op`
  // gets); the caller sets the rest.
  template <typename T>
  static PendingOp Of(LogOp op, StoreCallback<T> done) {
    PendingOp p;
    p.op = std::move(op);
    p.done.emplace<StoreCallback<T>>(std::move(done));
    return p;
  }

  size_t bytes() const { return EstimatedBytes(op); }

  // Hands the applied operation's answer to whoever waits for it: an error
  // or the decision its type calls for. A Begin is answered as decided
  // (parking an IN_USE one is the store's choice, made before; a DUPLICATE
  // past the batch's budget was refused by the apply, through
  // `result_budget`).
  void Deliver(OpAnswer answer) &&;

  void Fail(const absl::Status& status) && {
    std::visit(
        [&status](auto& callback) {
          if (callback) std::move(callback)(status);
        },
        done);
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
