// A stored idempotency record and its on-disk encoding.
//
// Value layout (little-endian, format version 1):
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

  // A record exists for readers only while now < expire_at.
  [[nodiscard]] bool IsLiveAt(int64_t now_ms) const {
    return now_ms < expire_at_ms;
  }
};

bool operator==(const Record& a, const Record& b);
inline bool operator!=(const Record& a, const Record& b) { return !(a == b); }

inline constexpr uint8_t kRecordFormatVersion = 1;
inline constexpr size_t kRecordHeaderSize = 56;
inline constexpr size_t kExpireAtOffset = 8;

[[nodiscard]] std::string EncodeRecord(const Record& record);

// Fails with DataLossError on a truncated value, an unknown format version or
// an invalid state/outcome byte.
[[nodiscard]] absl::StatusOr<Record> DecodeRecord(absl::string_view value);

// Reads only expire_at; nullopt when the value is too short or of an unknown
// version. Cheap enough for the compaction filter's hot loop.
[[nodiscard]] std::optional<int64_t> PeekExpireAt(absl::string_view value);

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
