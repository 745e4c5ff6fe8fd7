#include "storage/entry_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rocksdb/slice.h"

namespace dedup {

EntryBatch::EntryBatch(rocksdb::DB* db, const std::vector<LogOp>& ops,
                       bool read_gets)
    : db_(db), snapshot_(db->GetSnapshot()), slot_of_(ops.size(), kNoSlot) {
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
  for (size_t first = 0; first < keys.size(); first += kReadChunk) {
    ReadChunk(keys, first, std::min(kReadChunk, keys.size() - first));
  }
}

EntryBatch::~EntryBatch() { db_->ReleaseSnapshot(snapshot_); }

void EntryBatch::ReadChunk(const std::vector<rocksdb::Slice>& keys,
                           size_t first, size_t count) {
  std::vector<rocksdb::PinnableSlice> values(count);
  std::vector<rocksdb::Status> statuses(count);
  rocksdb::ReadOptions read;
  read.snapshot = snapshot_;
  db_->MultiGet(read, db_->DefaultColumnFamily(), count, &keys[first],
                values.data(), statuses.data(), /*sorted_input=*/true);
  for (size_t k = 0; k < count; ++k) {
    Slot& slot = slots_[first + k];
    if (statuses[k].IsNotFound()) continue;
    if (!statuses[k].ok()) {
      slot.status = absl::UnavailableError(
          absl::StrCat("storage read: ", statuses[k].ToString()));
      continue;
    }
    const absl::string_view value(values[k].data(), values[k].size());
    slot.stored_bytes = StoredRecordBytes(*slot.skey, value);
    absl::StatusOr<RecordView> view = DecodeRecordView(value);
    if (view.ok() && view->record.state == RecordState::kCompleted &&
        !view->result.empty()) {
      slot.result_bytes = view->result.size();
      slot.result_left_out = true;
      slot.value =
          std::string(value.substr(0, value.size() - slot.result_bytes));
    } else {
      // In flight, or damaged (Read reports it): kept as stored.
      slot.value = std::string(value);
    }
    held_bytes_ += slot.value->size();
  }
}

absl::StatusOr<EntryBatch::Found> EntryBatch::Read(size_t i) const {
  const Slot& slot = slots_[slot_of_[i]];
  if (!slot.status.ok()) return slot.status;
  Found found;
  if (!slot.value.has_value()) return found;
  absl::StatusOr<RecordView> view = DecodeRecordView(*slot.value);
  if (!view.ok()) return view.status();
  found.record = std::move(view->record);
  if (found.record->state == RecordState::kCompleted) {
    found.result_bytes =
        slot.result_left_out ? slot.result_bytes : view->result.size();
  } else {
    found.record->result = std::string(view->result);
    found.result_bytes = view->result.size();
  }
  return found;
}

absl::StatusOr<std::string> EntryBatch::Result(size_t i) const {
  const Slot& slot = slots_[slot_of_[i]];
  if (!slot.status.ok()) return slot.status;
  if (!slot.value.has_value()) return std::string();
  if (!slot.result_left_out) {
    absl::StatusOr<RecordView> view = DecodeRecordView(*slot.value);
    if (!view.ok()) return view.status();
    return std::string(view->result);
  }
  rocksdb::ReadOptions read;
  read.snapshot = snapshot_;
  rocksdb::PinnableSlice value;
  rocksdb::Status s =
      db_->Get(read, db_->DefaultColumnFamily(), *slot.skey, &value);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("storage read: ", s.ToString()));
  }
  absl::StatusOr<RecordView> view =
      DecodeRecordView(absl::string_view(value.data(), value.size()));
  if (!view.ok()) return view.status();
  held_bytes_ += view->result.size();
  return std::string(view->result);
}

void EntryBatch::Apply(size_t i, WriteKind kind, const Record& record) {
  Slot& slot = slots_[slot_of_[i]];
  switch (kind) {
    case WriteKind::kNone:
      return;
    case WriteKind::kPut:
      slot.value = EncodeRecord(record);
      slot.status = absl::OkStatus();
      slot.result_left_out = false;
      slot.written = true;
      return;
    case WriteKind::kDelete:
      slot.value.reset();
      slot.status = absl::OkStatus();
      slot.result_left_out = false;
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
