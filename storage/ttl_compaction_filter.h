// Drops expired records during RocksDB compactions so disk use stays bounded
// by the live set. Readers already treat a record as absent once
// now >= expire_at; the filter waits an extra grace period so that a clock
// step backwards cannot resurrect-then-lose a record mid-read.
//
// A completed record with a tombstone retention (Record::retain_until_ms) is
// kept until its retention ends, and once expired it is rewritten into its
// small tombstone form (no owner, result or checkpoint), so a retained
// tombstone costs its header and args_hash on disk, not its result.
#ifndef DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_
#define DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "storage/clock.h"
#include "storage/namespace_bytes.h"

namespace dedup {

// The keep/drop rule, separate so it can be tested without RocksDB. Metadata
// keys and values that do not decode are kept: the filter never destroys what
// it does not understand.
[[nodiscard]] bool ShouldDropExpired(absl::string_view key,
                                     absl::string_view value, int64_t now_ms,
                                     int64_t grace_ms);

// The smaller value to keep instead of `value`: its tombstone form, when it
// is an expired (by grace) record whose tombstone is still retained and
// that still holds more than a tombstone. nullopt: keep it as it is.
[[nodiscard]] std::optional<std::string> ShrinkToTombstone(
    absl::string_view key, absl::string_view value, int64_t now_ms,
    int64_t grace_ms);

// Thread-safe (RocksDB calls it from several compaction threads). Does not own
// `clock`, which must outlive it.
class TtlCompactionFilter : public rocksdb::CompactionFilter {
 public:
  TtlCompactionFilter(const Clock* clock, int64_t grace_ms)
      : clock_(clock), grace_ms_(grace_ms) {}

  bool Filter(int level, const rocksdb::Slice& key,
              const rocksdb::Slice& existing_value, std::string* new_value,
              bool* value_changed) const override;
  const char* Name() const override { return "dedup.TtlCompactionFilter"; }

  // Records dropped since construction.
  [[nodiscard]] uint64_t dropped() const { return dropped_.load(); }
  // Of those, tombstones (their retention ended).
  [[nodiscard]] uint64_t tombstones_dropped() const {
    return tombstones_dropped_.load();
  }
  // Expired records rewritten into their tombstone form.
  [[nodiscard]] uint64_t tombstones_made() const {
    return tombstones_made_.load();
  }

  // From now on a dropped record's bytes are subtracted from `bytes` (not
  // owned; null: stop), when it is still the newest version of its key in
  // `db`: a compaction sees a key's newest version among its input files
  // only, and a newer one elsewhere (the memtable, an upper level) has
  // already been counted in its place by the write that made it. Set `db`
  // to null before closing it.
  void CountDrops(rocksdb::DB* db, NamespaceBytes* bytes) {
    bytes_.store(bytes);
    db_.store(db);
  }

 private:
  // Adds `delta` to the key's namespace bytes when `value` is still the
  // newest version of `key`.
  void CountChange(absl::string_view key, absl::string_view value,
                   int64_t delta) const;

  const Clock* const clock_;
  const int64_t grace_ms_;
  mutable std::atomic<uint64_t> dropped_{0};
  mutable std::atomic<uint64_t> tombstones_dropped_{0};
  mutable std::atomic<uint64_t> tombstones_made_{0};
  std::atomic<rocksdb::DB*> db_{nullptr};
  std::atomic<NamespaceBytes*> bytes_{nullptr};
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_
