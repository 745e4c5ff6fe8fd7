#include "storage/replicated_ops.h"

#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "storage/authority.h"
#include "storage/replicated_meta.h"

namespace dedup::replicated_internal {
namespace {

// A stored result copied for operation `i`'s answer, counted.
absl::StatusOr<std::string> CopyResult(size_t i, OpContext& c) {
  absl::StatusOr<std::string> result = c.batch.Result(i);
  if (result.ok()) c.result_bytes += result->size();
  return result;
}

absl::Status ApplyBegin(const LogBegin& begin, size_t i,
                        EntryBatch::Found found, OpContext& c) {
  uint64_t& fence = c.fence;
  BeginDecision d = DecideBegin(found.record, begin.params, c.now,
                                [&fence] { return ++fence; });
  c.batch.Apply(i, d.write, d.record);
  if (c.gate == nullptr) return absl::OkStatus();
  if (d.status == BeginStatus::kDuplicate) {
    // A DUPLICATE writes nothing: the result is still the one found.
    absl::Status admitted = c.gate->Admit(i, found.result_bytes);
    if (!admitted.ok()) {
      c.out.answers.emplace_back(std::move(admitted));
      return absl::OkStatus();
    }
    absl::StatusOr<std::string> result = CopyResult(i, c);
    if (!result.ok()) return result.status();
    d.record.result = *std::move(result);
  }
  c.out.answers.emplace_back(std::move(d));
  return absl::OkStatus();
}

// Complete's idempotence (the same result again is OK) decides only its
// answer: without one to give, the stored result is not read.
absl::StatusOr<FencedDecision> DecideCompleteOp(const LogComplete& complete,
                                                size_t i,
                                                const EntryBatch::Found& found,
                                                OpContext& c) {
  absl::Status read;
  FencedDecision d =
      DecideComplete(found.record, complete.params, c.now, [&]() -> bool {
        if (c.gate == nullptr ||
            found.result_bytes != complete.params.result.size()) {
          return false;
        }
        absl::StatusOr<std::string> stored = c.batch.Result(i);
        if (!stored.ok()) {
          read = stored.status();
          return false;
        }
        return *stored == complete.params.result;
      });
  if (!read.ok()) return read;
  return d;
}

absl::Status ApplyFenced(const LogOp& op, size_t i,
                         const EntryBatch::Found& found, OpContext& c) {
  FencedDecision d;
  if (const auto* complete = std::get_if<LogComplete>(&op)) {
    absl::StatusOr<FencedDecision> decided =
        DecideCompleteOp(*complete, i, found, c);
    if (!decided.ok()) return decided.status();
    d = *std::move(decided);
  } else if (const auto* release = std::get_if<LogRelease>(&op)) {
    d = DecideRelease(found.record, release->fence, c.now);
  } else if (const auto* checkpoint = std::get_if<LogCheckpoint>(&op)) {
    d = DecideCheckpoint(found.record, checkpoint->params, c.now);
  } else {
    const LogRenew& renew = std::get<LogRenew>(op);
    d = DecideRenew(found.record, renew.fence, renew.lease_ms, c.now);
  }
  c.batch.Apply(i, d.write, d.record);
  // Parked Begins wait for an outcome or a release, not for a renewed
  // lease or a checkpoint.
  if (d.write != WriteKind::kNone && !std::holds_alternative<LogRenew>(op) &&
      !std::holds_alternative<LogCheckpoint>(op)) {
    c.out.settled_keys.push_back(*KeyOf(op));
  }
  if (c.gate != nullptr) c.out.answers.emplace_back(std::move(d));
  return absl::OkStatus();
}

absl::Status ApplyGet(size_t i, const EntryBatch::Found& found, OpContext& c) {
  std::optional<Record> live = LiveRecord(found.record, c.now);
  if (live.has_value() && live->state == RecordState::kCompleted) {
    absl::StatusOr<std::string> result = CopyResult(i, c);
    if (!result.ok()) return result.status();
    live->result = *std::move(result);
  }
  c.out.answers.emplace_back(std::move(live));
  return absl::OkStatus();
}

// A compare-and-set: every replica holds the same map epoch before the
// entry, so each refuses or accepts alike.
absl::Status ApplySetShardMap(const LogSetShardMap& map, OpContext& c) {
  if (map.expected_epoch != c.map_epoch || map.epoch <= c.map_epoch) {
    if (c.gate != nullptr) {
      c.out.answers.emplace_back(absl::FailedPreconditionError(
          absl::StrCat("the shard map's epoch is ", c.map_epoch, ", not ",
                       map.expected_epoch, ": read the map again")));
    }
    return absl::OkStatus();
  }
  c.batch.batch().Put(ShardMapKey(), map.map);
  c.map_epoch = map.epoch;
  c.out.shard_map_changed = true;
  if (c.gate != nullptr) c.out.answers.emplace_back(true);
  return absl::OkStatus();
}

}  // namespace

// Applies `op`, the entry's operation `i`: decides it on its stored record,
// stages its write in the batch and, when someone is answered, appends its
// answer; records the key it settled, if any. An error fails the whole
// entry (a storage failure); a record that does not decode fails this
// operation alone, in its answer.
absl::Status ApplyOp(const LogOp& op, size_t i, OpContext& c) {
  if (const auto* member = std::get_if<LogSetMember>(&op)) {
    c.batch.batch().Put(MemberKey(member->member_id), member->client_address);
    c.out.members_changed = true;
    if (c.gate != nullptr) c.out.answers.emplace_back(true);
    return absl::OkStatus();
  }
  if (const auto* map = std::get_if<LogSetShardMap>(&op)) {
    return ApplySetShardMap(*map, c);
  }
  // A read changes nothing: with nobody to answer, its key is not read.
  if (c.gate == nullptr && std::holds_alternative<LogGet>(op)) {
    return absl::OkStatus();
  }
  absl::StatusOr<EntryBatch::Found> found = c.batch.Read(i);
  if (!found.ok()) {
    // A record that does not decode is refused alone, and kept as it is.
    if (absl::IsDataLoss(found.status())) {
      if (c.gate != nullptr) c.out.answers.emplace_back(found.status());
      return absl::OkStatus();
    }
    return found.status();
  }
  switch (TypeOf(op)) {
    case OpType::kBegin:
      return ApplyBegin(std::get<LogBegin>(op), i, *std::move(found), c);
    case OpType::kComplete:
    case OpType::kRelease:
    case OpType::kRenew:
    case OpType::kCheckpoint:
      return ApplyFenced(op, i, *found, c);
    case OpType::kGet:
      return ApplyGet(i, *found, c);
    case OpType::kSetMember:  // handled above
    case OpType::kSetShardMap:
      break;
    case OpType::kForget: {
      const bool existed = LiveRecord(found->record, c.now).has_value();
      // Delete even an expired leftover so Forget always frees space.
      if (found->record.has_value()) {
        c.batch.Apply(i, WriteKind::kDelete, Record());
        c.out.settled_keys.push_back(*KeyOf(op));
      }
      if (c.gate != nullptr) c.out.answers.emplace_back(existed);
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace dedup::replicated_internal
