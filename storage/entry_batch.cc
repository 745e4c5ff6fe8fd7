#include "storage/entry_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rocksdb/slice.h"

namespace dedup {

EntryBatch::EntryBatch(rocksdb::DB* db, const std::vector<LogOp>& ops,
                       bool read_gets)
    : slot_of_(ops.size(), kNoSlot) {
  std::vector<uint32_t> order;
  order.reserve(ops.size());
  for (uint32_t i = 0; i < ops.size(); ++i) {
    if (KeyOf(ops[i]) == nullptr) continue;
    if (!read_gets && TypeOf(ops[i]) == OpType::kGet) continue;
    order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&ops](uint32_t a, uint32_t b) {
    return *KeyOf(ops[a]) < *KeyOf(ops[b]);
  });
  std::vector<rocksdb::Slice> keys;
  keys.reserve(order.size());
  for (uint32_t i : order) {
    const std::string* skey = KeyOf(ops[i]);
    if (keys.empty() || keys.back() != rocksdb::Slice(*skey)) {
      keys.emplace_back(*skey);
      slots_.emplace_back().skey = skey;
    }
    slot_of_[i] = static_cast<uint32_t>(keys.size() - 1);
  }
  if (keys.empty()) return;
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), keys.size(),
               keys.data(), values.data(), statuses.data(),
               /*sorted_input=*/true);
  for (size_t k = 0; k < keys.size(); ++k) {
    if (statuses[k].ok()) {
      slots_[k].value = values[k].ToString();
      slots_[k].stored_bytes =
          StoredRecordBytes(*slots_[k].skey, *slots_[k].value);
    } else if (!statuses[k].IsNotFound()) {
      slots_[k].status = absl::UnavailableError(
          absl::StrCat("storage read: ", statuses[k].ToString()));
    }
  }
}

absl::StatusOr<EntryBatch::Found> EntryBatch::Read(size_t i) const {
  const Slot& slot = slots_[slot_of_[i]];
  if (!slot.status.ok()) return slot.status;
  Found found;
  if (!slot.value.has_value()) return found;
  absl::StatusOr<RecordView> view = DecodeRecordView(*slot.value);
  if (!view.ok()) return view.status();
  found.result = view->result;
  found.record = std::move(view->record);
  if (found.record->state != RecordState::kCompleted) {
    found.record->result = std::string(found.result);
  }
  return found;
}

void EntryBatch::Apply(size_t i, WriteKind kind, const Record& record) {
  Slot& slot = slots_[slot_of_[i]];
  switch (kind) {
    case WriteKind::kNone:
      return;
    case WriteKind::kPut:
      slot.value = EncodeRecord(record);
      slot.status = absl::OkStatus();
      slot.written = true;
      return;
    case WriteKind::kDelete:
      slot.value.reset();
      slot.status = absl::OkStatus();
      slot.written = true;
      return;
  }
}

rocksdb::WriteBatch& EntryBatch::Finish() {
  for (const Slot& slot : slots_) {
    if (!slot.written) continue;
    if (slot.value.has_value()) {
      batch_.Put(*slot.skey, *slot.value);
    } else {
      batch_.Delete(*slot.skey);
    }
  }
  return batch_;
}

std::vector<LeaseTracker::Write> EntryBatch::Writes() const {
  std::vector<LeaseTracker::Write> writes;
  for (const Slot& slot : slots_) {
    if (!slot.written) continue;
    writes.emplace_back(*slot.skey,
                        slot.value.has_value() ? &*slot.value : nullptr);
  }
  return writes;
}

}  // namespace dedup
