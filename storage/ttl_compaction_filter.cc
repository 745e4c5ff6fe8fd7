#include "storage/ttl_compaction_filter.h"

#include <optional>

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
  if (drop) dropped_.fetch_add(1, std::memory_order_relaxed);
  return drop;
}

}  // namespace dedup
