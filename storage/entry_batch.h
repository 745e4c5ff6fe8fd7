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

// Every record the operations name is read up front in sorted MultiGets:
// batched lookups share each filter partition and index block among the
// keys that fall in it (a Get per key was a third of a replica's CPU under
// BeginBatch). A key that several of the entry's operations name is read
// once, and each sees the earlier ones' writes.
//
// A stored completed record is kept without its result, which decisions
// never need (a completed record is only ever replaced by a fresh claim or
// a tombstone, never written back): Result reads it again, for the answers
// that carry it. What a batch holds is thus each named record without its
// result plus the values its operations write, whatever the results stored.
class EntryBatch {
 public:
  // Reads the records `ops` name (a kGet's only with `read_gets`; Read of
  // an unread kGet must not be called), at one snapshot of `db` that
  // Result reads too. `db` and `ops` must outlive the batch.
  EntryBatch(rocksdb::DB* db, const std::vector<LogOp>& ops, bool read_gets);
  ~EntryBatch();
  EntryBatch(const EntryBatch&) = delete;
  EntryBatch& operator=(const EntryBatch&) = delete;

  // What operation `i` finds at its key: the record stored, or written by
  // an earlier operation of the entry. A completed record comes without
  // its result (`record->result` is empty; `result_bytes` is its size); an
  // in-flight one whole (it holds no result, but whatever it holds is
  // kept).
  struct Found {
    std::optional<Record> record;
    size_t result_bytes = 0;
  };
  // UNAVAILABLE when the key's read failed; DATA_LOSS when its record does
  // not decode.
  [[nodiscard]] absl::StatusOr<Found> Read(size_t i) const;
  // The result of the record operation `i` finds (Read), copied; reads it
  // from storage again when it was not kept. UNAVAILABLE when that read
  // fails.
  [[nodiscard]] absl::StatusOr<std::string> Result(size_t i) const;

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

  // Bytes of stored values the batch kept when it read them (results left
  // out), and of results Result read again since.
  [[nodiscard]] uint64_t held_bytes() const { return held_bytes_; }

  // Each written key's final value (nullptr: deleted). Valid while the
  // batch is.
  [[nodiscard]] std::vector<LeaseTracker::Write> Writes() const;

 private:
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  // Keys per MultiGet: bounds the values read and not yet trimmed.
  static constexpr size_t kReadChunk = 32;
  // One per distinct key: its current record.
  struct Slot {
    const std::string* skey = nullptr;  // the entry's own
    absl::Status status;                // not OK: the read failed
    // The encoding of the current record (nullopt: none); a stored
    // completed record's without its result (which runs to the end).
    std::optional<std::string> value;
    size_t result_bytes = 0;  // of the stored record, when left out
    bool result_left_out = false;
    bool written = false;
    int64_t stored_bytes = 0;  // what the key held before the entry
  };
  void ReadChunk(const std::vector<rocksdb::Slice>& keys, size_t first,
                 size_t count);

  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
  std::vector<uint32_t> slot_of_;  // per operation
  std::vector<Slot> slots_;
  rocksdb::WriteBatch batch_;
  mutable uint64_t held_bytes_ = 0;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_ENTRY_BATCH_H_
