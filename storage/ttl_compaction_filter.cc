#include "storage/ttl_compaction_filter.h"

#include <optional>
#include <string>

#include "storage/record.h"
#include "storage/storage_key.h"

namespace dedup {

bool ShouldDropExpired(absl::string_view key, absl::string_view value,
                       int64_t now_ms, int64_t grace_ms) {
  if (!IsRecordKey(key)) return false;
  std::optional<int64_t> drop_at = PeekDropAt(value);
  // now - grace, not drop_at + grace: a damaged value's drop_at near
  // INT64_MAX must not overflow into "long expired" (found by fuzzing).
  return drop_at.has_value() && *drop_at <= now_ms - grace_ms;
}

std::optional<std::string> ShrinkToTombstone(absl::string_view key,
                                             absl::string_view value,
                                             int64_t now_ms, int64_t grace_ms) {
  // A record due to be dropped is dropped, not shrunk.
  if (!IsRecordKey(key) || ShouldDropExpired(key, value, now_ms, grace_ms)) {
    return std::nullopt;
  }
  std::optional<int64_t> expire_at = PeekExpireAt(value);
  if (!expire_at.has_value() || *expire_at > now_ms - grace_ms) {
    return std::nullopt;
  }
  absl::StatusOr<Record> record = DecodeRecord(value);
  if (!record.ok() || record->state != RecordState::kCompleted ||
      record->retain_until_ms == 0) {
    return std::nullopt;
  }
  std::string tombstone = EncodeRecord(TombstoneOf(*record));
  if (tombstone.size() >= value.size()) return std::nullopt;
  return tombstone;
}

bool TtlCompactionFilter::Filter(int /*level*/, const rocksdb::Slice& key,
                                 const rocksdb::Slice& existing_value,
                                 std::string* new_value,
                                 bool* value_changed) const {
  const absl::string_view k(key.data(), key.size());
  const absl::string_view v(existing_value.data(), existing_value.size());
  const int64_t now_ms = clock_->NowMillis();
  if (ShouldDropExpired(k, v, now_ms, grace_ms_)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    std::optional<int64_t> expire_at = PeekExpireAt(v);
    std::optional<int64_t> drop_at = PeekDropAt(v);
    if (expire_at.has_value() && drop_at.has_value() && *drop_at > *expire_at) {
      tombstones_dropped_.fetch_add(1, std::memory_order_relaxed);
    }
    CountChange(k, v, -StoredRecordBytes(k, v));
    return true;
  }
  if (std::optional<std::string> tombstone =
          ShrinkToTombstone(k, v, now_ms, grace_ms_)) {
    tombstones_made_.fetch_add(1, std::memory_order_relaxed);
    CountChange(k, v,
                StoredRecordBytes(k, *tombstone) - StoredRecordBytes(k, v));
    *new_value = *std::move(tombstone);
    *value_changed = true;
  }
  return false;
}

void TtlCompactionFilter::CountChange(absl::string_view key,
                                      absl::string_view value,
                                      int64_t delta) const {
  NamespaceBytes* const bytes = bytes_.load();
  rocksdb::DB* const db = db_.load();
  if (bytes == nullptr || db == nullptr) return;
  // Only expired records are dropped or shrunk, so this costs one read per
  // record that compactions free or shrink, not per record they rewrite. (A
  // write racing with the drop of the very record it replaces can still count
  // it twice; the scan at the next open starts afresh.)
  std::string newest;
  const rocksdb::Status s = db->Get(
      rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &newest);
  if (!s.ok() || newest != value) return;
  bytes->AddRecord(key, delta);
}

}  // namespace dedup
