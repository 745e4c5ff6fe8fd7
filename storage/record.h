// A stored idempotency record and its on-disk encoding.
//
// Value layout (little-endian). Format version 1:
//   offset  0  u8   format version
//           1  u8   state (RecordState)
//           2  u8   outcome (Outcome)
//           3  u8   reserved, 0
//           4  u32  attempts
//           8  i64  expire_at_ms      <- read in place by the TTL filter
//          16  i64  lease_until_ms
//          24  u64  fence
//          32  i64  created_at_ms
//          40  i64  completed_at_ms
//          48  u32  ttl_s
//          52  u16  args_hash length
//          54  u16  owner length
//          56  args_hash, owner, result (result runs to the end)
// Format version 2 (written only when a version-2 field is set, so records
// that use none keep the smaller version-1 form byte for byte):
//   offset  0..55 as version 1, the version byte being 2
//          56  i64  retain_until_ms   <- read in place by the TTL filter
//          64  i64  checkpoint_at_ms
//          72  u64  checkpoint_fence
//          80  u16  checkpoint step length
//          82  u16  reserved, 0
//          84  u32  checkpoint data length
//          88  args_hash, owner, checkpoint step, checkpoint data, result
// One decoder serves reads and the compaction filter, so they never disagree.
#ifndef DEDUP_STORAGE_RECORD_H_
#define DEDUP_STORAGE_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

enum class RecordState : uint8_t { kInFlight = 1, kCompleted = 2 };
enum class Outcome : uint8_t { kNone = 0, kSuccess = 1, kError = 2 };

struct Record {
  RecordState state = RecordState::kInFlight;
  Outcome outcome = Outcome::kNone;
  uint32_t attempts = 0;
  int64_t expire_at_ms = 0;
  int64_t lease_until_ms = 0;
  uint64_t fence = 0;
  int64_t created_at_ms = 0;
  int64_t completed_at_ms = 0;
  // TTL the record was given; Complete reuses it unless told otherwise.
  uint32_t ttl_s = 0;
  std::string args_hash;
  std::string owner;
  std::string result;
  // A completed record leaves a tombstone (fence, outcome, args_hash,
  // completed_at; no result) from expire_at until this time, so a retry
  // that comes after expiry learns the operation already ran instead of
  // running it again. 0: no tombstone.
  int64_t retain_until_ms = 0;
  // The last progress an owner recorded on an in-flight record
  // (Checkpoint), carried over to whoever takes the execution over. Empty
  // step and data with checkpoint_fence 0: none.
  std::string checkpoint_step;
  std::string checkpoint_data;
  uint64_t checkpoint_fence = 0;
  int64_t checkpoint_at_ms = 0;

  // A record exists for readers only while now < expire_at.
  [[nodiscard]] bool IsLiveAt(int64_t now_ms) const {
    return now_ms < expire_at_ms;
  }
  // Expired, but its tombstone is still kept.
  [[nodiscard]] bool IsTombstoneAt(int64_t now_ms) const {
    return state == RecordState::kCompleted && !IsLiveAt(now_ms) &&
           now_ms < retain_until_ms;
  }
  [[nodiscard]] bool has_checkpoint() const { return checkpoint_fence != 0; }
  // When nothing of the record is needed any more: expiry, or the end of
  // its tombstone's retention.
  [[nodiscard]] int64_t drop_at_ms() const {
    // retain_until 0 is "no tombstone", whatever expire_at holds (a
    // damaged value's may even be negative: found by fuzzing).
    return retain_until_ms != 0 && retain_until_ms > expire_at_ms
               ? retain_until_ms
               : expire_at_ms;
  }
};

// What a tombstone keeps of `record`: everything but the owner, the result
// and the checkpoint. The compaction filter rewrites expired records into
// this form; readers of an expired record look only at these fields.
[[nodiscard]] Record TombstoneOf(const Record& record);

bool operator==(const Record& a, const Record& b);
inline bool operator!=(const Record& a, const Record& b) { return !(a == b); }

inline constexpr uint8_t kRecordFormatVersion = 1;
inline constexpr size_t kRecordHeaderSize = 56;
inline constexpr uint8_t kRecordFormatVersion2 = 2;
inline constexpr size_t kRecordHeaderSizeV2 = 88;
inline constexpr size_t kExpireAtOffset = 8;
inline constexpr size_t kRetainUntilOffset = 56;

[[nodiscard]] std::string EncodeRecord(const Record& record);

// Fails with DataLossError on a truncated value, an unknown format version or
// an invalid state/outcome byte.
[[nodiscard]] absl::StatusOr<Record> DecodeRecord(absl::string_view value);

// A decoded record whose result was not copied: `record.result` is empty and
// `result` views the result in the encoded value (valid while it is).
struct RecordView {
  Record record;
  absl::string_view result;
};

// DecodeRecord without copying the result, which may be the bulk of the
// value: for deciding on a record, which never needs it. Fails as
// DecodeRecord.
[[nodiscard]] absl::StatusOr<RecordView> DecodeRecordView(
    absl::string_view value);

// Reads only expire_at; nullopt when the value is too short or of an unknown
// version. Cheap enough for the compaction filter's hot loop.
[[nodiscard]] std::optional<int64_t> PeekExpireAt(absl::string_view value);

// When the stored value may be dropped (Record::drop_at_ms), read in place;
// nullopt as for PeekExpireAt.
[[nodiscard]] std::optional<int64_t> PeekDropAt(absl::string_view value);

// The header fields that say whether a lease is held, without copying the
// variable parts. nullopt when the value does not decode.
struct LeaseHeader {
  RecordState state = RecordState::kInFlight;
  int64_t expire_at_ms = 0;
  int64_t lease_until_ms = 0;
};
[[nodiscard]] std::optional<LeaseHeader> PeekLeaseHeader(
    absl::string_view value);

}  // namespace dedup

#endif  // DEDUP_STORAGE_RECORD_H_
