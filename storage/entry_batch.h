// The reads and writes of one replicated log entry's operations, applied by
// ReplicatedState (replicated_state.h) in one RocksDB write.
//
// Thread safety: none; one entry's apply uses it on one thread.
#ifndef DEDUP_STORAGE_ENTRY_BATCH_H_
#define DEDUP_STORAGE_ENTRY_BATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/authority.h"
#include "storage/lease_tracker.h"
#include "storage/log_entry.h"
#include "storage/namespace_bytes.h"
#include "storage/record.h"

namespace dedup {

// Every record the operations name is read up front in one sorted MultiGet:
// batched lookups share each filter partition and index block among the
// keys that fall in it (a Get per key was a third of a replica's CPU under
// BeginBatch). A key that several of the entry's operations name is read
// once, and each sees the earlier ones' writes.
class EntryBatch {
 public:
  // Reads the records `ops` name (a kGet's only with `read_gets`; Read of
  // an unread kGet must not be called). `ops` must outlive the batch.
  EntryBatch(rocksdb::DB* db, const std::vector<LogOp>& ops, bool read_gets);

  // What operation `i` finds at its key: the record stored, or written by
  // an earlier operation of the entry, without copying a completed record's
  // result (decisions never write it back: a completed record is only ever
  // replaced by a fresh claim or a tombstone); `result` views that result
  // in place until the next Apply to the key. An in-flight record is
  // decoded whole (it holds no result, but whatever it holds is kept).
  struct Found {
    std::optional<Record> record;
    absl::string_view result;
  };
  // UNAVAILABLE when the key's read failed; DATA_LOSS when its record does
  // not decode.
  [[nodiscard]] absl::StatusOr<Found> Read(size_t i) const;

  // Operation `i` writes `record` to its key, or deletes it.
  void Apply(size_t i, WriteKind kind, const Record& record);

  // The entry's RocksDB write, for writes that are not records'.
  rocksdb::WriteBatch& batch() { return batch_; }
  // Stages each written key's final value (once per key, however many of
  // the entry's operations wrote it) and returns the entry's write. Call
  // once, after the last Apply.
  rocksdb::WriteBatch& Finish();

  // Calls fn(skey, delta) per written key: the bytes its final value stores
  // less those it held before the entry (namespace_bytes.h).
  template <typename Fn>
  void ForEachStoredBytesChange(Fn fn) const {
    for (const Slot& slot : slots_) {
      if (!slot.written) continue;
      const int64_t now = slot.value.has_value()
                              ? StoredRecordBytes(*slot.skey, *slot.value)
                              : 0;
      fn(*slot.skey, now - slot.stored_bytes);
    }
  }

  // Each written key's final value (nullptr: deleted). Valid while the
  // batch is.
  [[nodiscard]] std::vector<LeaseTracker::Write> Writes() const;

 private:
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  // One per distinct key: its current record.
  struct Slot {
    const std::string* skey = nullptr;  // the entry's own
    absl::Status status;                // not OK: the read failed
    std::optional<std::string> value;   // nullopt: no record
    bool written = false;
    int64_t stored_bytes = 0;  // what the key held before the entry
  };
  std::vector<uint32_t> slot_of_;  // per operation
  std::vector<Slot> slots_;
  rocksdb::WriteBatch batch_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_ENTRY_BATCH_H_
