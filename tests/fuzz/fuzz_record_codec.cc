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
    if (value.size() < kRecordHeaderSize ||
        static_cast<uint8_t>(value[0]) != kRecordFormatVersion) {
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

  const std::string encoded = EncodeRecord(r);
  std::string expected(value);
  expected[3] = '\0';  // reserved byte: ignored on read, written as 0
  FUZZ_CHECK(encoded == expected);
  absl::StatusOr<Record> again = DecodeRecord(encoded);
  FUZZ_CHECK(again.ok() && *again == r);
}

void CheckCompactionFilter(absl::string_view value, int64_t now_ms,
                           int64_t grace_ms) {
  const std::string record_key = EncodeStorageKey("ns", "k");
  const bool drop = ShouldDropExpired(record_key, value, now_ms, grace_ms);
  const std::optional<int64_t> expire_at = PeekExpireAt(value);
  // The rule in exact arithmetic (no int64 wrap-around).
  const bool expected =
      expire_at.has_value() &&
      static_cast<__int128>(now_ms) >=
          static_cast<__int128>(*expire_at) + static_cast<__int128>(grace_ms);
  FUZZ_CHECK(drop == expected);
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
