// Fuzzes the stored-record codec (storage/record.h), the compaction filter's
// in-place expiry read (storage/ttl_compaction_filter.h) and the storage key
// layout (storage/storage_key.h) on arbitrary bytes.
//
// Invariants:
// - nothing crashes or reads outside the input (ASan), no UB (UBSan);
// - a value that decodes re-encodes to the same bytes, except the reserved
//   header byte, which the decoder ignores; decoding those bytes again gives
//   the same record;
// - the cheap peeks agree with the full decoder: they refuse what it refuses
//   for the version and length, and read the same fields when it succeeds;
// - the compaction filter keeps metadata keys and values it cannot read, and
//   drops a record only once now >= expire_at + grace (computed without
//   overflow here);
// - a storage key built from any namespace (<= 255 bytes) and key is a record
//   key whose slot is SlotOf(namespace, key) and whose bytes spell them back.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/record.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"
#include "tests/fuzz/fuzz_check.h"

namespace dedup {
namespace {

constexpr int64_t kNowMs = 1'700'000'000'000;  // a realistic clock reading
constexpr int64_t kGraceMs = 60'000;           // the default grace

void CheckRecordCodec(absl::string_view value) {
  absl::StatusOr<Record> decoded = DecodeRecord(value);
  const std::optional<int64_t> expire_at = PeekExpireAt(value);
  const std::optional<LeaseHeader> lease = PeekLeaseHeader(value);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss);
    // The peeks may accept a value whose variable part is damaged (they do
    // not read it), but never one the decoder refuses for its header length
    // or version.
    const uint8_t version = value.empty() ? 0 : static_cast<uint8_t>(value[0]);
    if (!(version == kRecordFormatVersion &&
          value.size() >= kRecordHeaderSize) &&
        !(version == kRecordFormatVersion2 &&
          value.size() >= kRecordHeaderSizeV2)) {
      FUZZ_CHECK(!expire_at.has_value());
      FUZZ_CHECK(!lease.has_value());
    }
    return;
  }
  const Record& r = *decoded;
  FUZZ_CHECK(r.state == RecordState::kInFlight ||
             r.state == RecordState::kCompleted);
  FUZZ_CHECK(r.outcome == Outcome::kNone || r.outcome == Outcome::kSuccess ||
             r.outcome == Outcome::kError);
  FUZZ_CHECK(expire_at.has_value() && *expire_at == r.expire_at_ms);
  FUZZ_CHECK(lease.has_value() && lease->state == r.state &&
             lease->expire_at_ms == r.expire_at_ms &&
             lease->lease_until_ms == r.lease_until_ms);

  FUZZ_CHECK(PeekDropAt(value).has_value() &&
             *PeekDropAt(value) == r.drop_at_ms());
  const std::string encoded = EncodeRecord(r);
  // The encoder picks the smallest version that holds the fields: a
  // version-2 value without version-2 fields comes back as version 1.
  if (encoded[0] == value[0]) {
    std::string expected(value);
    expected[3] = '\0';  // reserved bytes: ignored on read, written as 0
    if (static_cast<uint8_t>(value[0]) == kRecordFormatVersion2) {
      expected[82] = '\0';
      expected[83] = '\0';
    }
    FUZZ_CHECK(encoded == expected);
  }
  absl::StatusOr<Record> again = DecodeRecord(encoded);
  FUZZ_CHECK(again.ok() && *again == r);
}

void CheckCompactionFilter(absl::string_view value, int64_t now_ms,
                           int64_t grace_ms) {
  const std::string record_key = EncodeStorageKey("ns", "k");
  const bool drop = ShouldDropExpired(record_key, value, now_ms, grace_ms);
  const std::optional<int64_t> drop_at = PeekDropAt(value);
  // The rule in exact arithmetic (no int64 wrap-around).
  const bool expected =
      drop_at.has_value() &&
      static_cast<__int128>(now_ms) >=
          static_cast<__int128>(*drop_at) + static_cast<__int128>(grace_ms);
  FUZZ_CHECK(drop == expected);
  // A shrunk value is a smaller, decodable tombstone of the same record.
  if (std::optional<std::string> small =
          ShrinkToTombstone(record_key, value, now_ms, grace_ms)) {
    FUZZ_CHECK(!drop && small->size() < value.size());
    absl::StatusOr<Record> before = DecodeRecord(value);
    absl::StatusOr<Record> after = DecodeRecord(*small);
    FUZZ_CHECK(before.ok() && after.ok() && *after == TombstoneOf(*before));
  }
  FUZZ_CHECK(
      !ShouldDropExpired(FenceReservationKey(), value, now_ms, grace_ms));
}

void CheckStorageKey(absl::string_view data) {
  // Any bytes: the predicate never reads past the input.
  if (IsRecordKey(data)) FUZZ_CHECK(SlotOfStorageKey(data) < kSlotCount);

  if (data.empty()) return;
  const size_t ns_len =
      static_cast<unsigned char>(data[0]) % (data.size());  // < size
  const absl::string_view ns = data.substr(1, ns_len);
  const absl::string_view key = data.substr(1 + ns.size());
  const std::string skey = EncodeStorageKey(ns, key);
  FUZZ_CHECK(IsRecordKey(skey));
  FUZZ_CHECK(SlotOf(ns, key) < kSlotCount);
  FUZZ_CHECK(SlotOfStorageKey(skey) == SlotOf(ns, key));
  FUZZ_CHECK(static_cast<unsigned char>(skey[2]) == ns.size());
  FUZZ_CHECK(absl::string_view(skey).substr(3, ns.size()) == ns);
  FUZZ_CHECK(absl::string_view(skey).substr(3 + ns.size()) == key);
  // Every record key sorts below the metadata prefix.
  FUZZ_CHECK(absl::string_view(skey) < kMetaPrefix);
  FUZZ_CHECK(!IsRecordKey(FenceReservationKey()));
}

}  // namespace
}  // namespace dedup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  dedup::CheckRecordCodec(bytes);
  // A realistic clock with the default grace, and with none.
  dedup::CheckCompactionFilter(bytes, dedup::kNowMs, dedup::kGraceMs);
  dedup::CheckCompactionFilter(bytes, dedup::kNowMs, 0);
  dedup::CheckStorageKey(bytes);
  return 0;
}
