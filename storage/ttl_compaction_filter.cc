#include "storage/ttl_compaction_filter.h"

#include <optional>
#include <string>

#include "storage/record.h"
#include "storage/storage_key.h"

namespace dedup {

bool ShouldDropExpired(absl::string_view key, absl::string_view value,
                       int64_t now_ms, int64_t grace_ms) {
  if (!IsRecordKey(key)) return false;
  std::optional<int64_t> expire_at = PeekExpireAt(value);
  // now - grace, not expire_at + grace: a damaged value's expire_at near
  // INT64_MAX must not overflow into "long expired" (found by fuzzing).
  return expire_at.has_value() && *expire_at <= now_ms - grace_ms;
}

bool TtlCompactionFilter::Filter(int /*level*/, const rocksdb::Slice& key,
                                 const rocksdb::Slice& existing_value,
                                 std::string* /*new_value*/,
                                 bool* /*value_changed*/) const {
  const bool drop = ShouldDropExpired(
      absl::string_view(key.data(), key.size()),
      absl::string_view(existing_value.data(), existing_value.size()),
      clock_->NowMillis(), grace_ms_);
  if (drop) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    CountDrop(absl::string_view(key.data(), key.size()),
              absl::string_view(existing_value.data(), existing_value.size()));
  }
  return drop;
}

void TtlCompactionFilter::CountDrop(absl::string_view key,
                                    absl::string_view value) const {
  NamespaceBytes* const bytes = bytes_.load();
  rocksdb::DB* const db = db_.load();
  if (bytes == nullptr || db == nullptr) return;
  // Only expired records are dropped, so this costs one read per record
  // that compactions free, not per record they rewrite. (A write racing
  // with the drop of the very record it replaces can still count it twice;
  // the scan at the next open starts afresh.)
  std::string newest;
  const rocksdb::Status s = db->Get(
      rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &newest);
  if (!s.ok() || newest != value) return;
  bytes->AddRecord(key, -StoredRecordBytes(key, value));
}

}  // namespace dedup
