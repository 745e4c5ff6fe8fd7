#include "replication/pending_op.h"

#include <variant>

namespace dedup {

void PendingOp::Deliver(OpAnswer answer) && {
  if (auto* error = std::get_if<absl::Status>(&answer)) {
    std::move(*this).Fail(*error);
    return;
  }
  switch (TypeOf(op)) {
    case OpType::kBegin: {
      auto& begin_done = std::get<StoreCallback<BeginResult>>(done);
      BeginDecision& d = std::get<BeginDecision>(answer);
      std::move(begin_done)(BeginResult{std::move(d), waited});
      return;
    }
    case OpType::kComplete:
    case OpType::kRelease:
    case OpType::kRenew:
    case OpType::kCheckpoint:
      std::move(std::get<StoreCallback<FencedDecision>>(done))(
          std::get<FencedDecision>(std::move(answer)));
      return;
    case OpType::kGet:
      std::move(std::get<StoreCallback<std::optional<Record>>>(done))(
          std::get<std::optional<Record>>(std::move(answer)));
      return;
    case OpType::kForget:
    case OpType::kSetMember:
    case OpType::kSetShardMap:
      std::move(std::get<StoreCallback<bool>>(done))(std::get<bool>(answer));
      return;
  }
}

}  // namespace dedup
