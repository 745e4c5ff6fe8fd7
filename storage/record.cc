#include "storage/record.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/coding.h"

namespace dedup {
namespace {

// Signed times in the header: two's complement, as Fixed64 (coding.h).
void EncodeInt64(char* dst, int64_t value) {
  EncodeFixed64(dst, static_cast<uint64_t>(value));
}

int64_t DecodeInt64(const char* src) {
  return static_cast<int64_t>(DecodeFixed64(src));
}

}  // namespace

bool operator==(const Record& a, const Record& b) {
  return a.state == b.state && a.outcome == b.outcome &&
         a.attempts == b.attempts && a.expire_at_ms == b.expire_at_ms &&
         a.lease_until_ms == b.lease_until_ms && a.fence == b.fence &&
         a.created_at_ms == b.created_at_ms &&
         a.completed_at_ms == b.completed_at_ms && a.ttl_s == b.ttl_s &&
         a.args_hash == b.args_hash && a.owner == b.owner &&
         a.result == b.result && a.retain_until_ms == b.retain_until_ms &&
         a.checkpoint_step == b.checkpoint_step &&
         a.checkpoint_data == b.checkpoint_data &&
         a.checkpoint_fence == b.checkpoint_fence &&
         a.checkpoint_at_ms == b.checkpoint_at_ms;
}

Record TombstoneOf(const Record& record) {
  Record t;
  t.state = record.state;
  t.outcome = record.outcome;
  t.attempts = record.attempts;
  t.expire_at_ms = record.expire_at_ms;
  t.lease_until_ms = record.lease_until_ms;
  t.fence = record.fence;
  t.created_at_ms = record.created_at_ms;
  t.completed_at_ms = record.completed_at_ms;
  t.ttl_s = record.ttl_s;
  t.args_hash = record.args_hash;
  t.retain_until_ms = record.retain_until_ms;
  return t;
}

namespace {

bool NeedsVersion2(const Record& r) {
  return r.retain_until_ms != 0 || r.checkpoint_fence != 0 ||
         r.checkpoint_at_ms != 0 || !r.checkpoint_step.empty() ||
         !r.checkpoint_data.empty();
}

bool IsKnownVersion(absl::string_view value) {
  if (value.empty()) return false;
  const uint8_t version = static_cast<uint8_t>(value[0]);
  return (version == kRecordFormatVersion &&
          value.size() >= kRecordHeaderSize) ||
         (version == kRecordFormatVersion2 &&
          value.size() >= kRecordHeaderSizeV2);
}

}  // namespace

std::string EncodeRecord(const Record& r) {
  const bool v2 = NeedsVersion2(r);
  const size_t header = v2 ? kRecordHeaderSizeV2 : kRecordHeaderSize;
  std::string out(header, '\0');
  char* h = out.data();
  h[0] = static_cast<char>(v2 ? kRecordFormatVersion2 : kRecordFormatVersion);
  h[1] = static_cast<char>(r.state);
  h[2] = static_cast<char>(r.outcome);
  EncodeFixed32(h + 4, r.attempts);
  EncodeInt64(h + kExpireAtOffset, r.expire_at_ms);
  EncodeInt64(h + 16, r.lease_until_ms);
  EncodeFixed64(h + 24, r.fence);
  EncodeInt64(h + 32, r.created_at_ms);
  EncodeInt64(h + 40, r.completed_at_ms);
  EncodeFixed32(h + 48, r.ttl_s);
  EncodeFixed16(h + 52, static_cast<uint16_t>(r.args_hash.size()));
  EncodeFixed16(h + 54, static_cast<uint16_t>(r.owner.size()));
  if (v2) {
    EncodeInt64(h + kRetainUntilOffset, r.retain_until_ms);
    EncodeInt64(h + 64, r.checkpoint_at_ms);
    EncodeFixed64(h + 72, r.checkpoint_fence);
    EncodeFixed16(h + 80, static_cast<uint16_t>(r.checkpoint_step.size()));
    EncodeFixed32(h + 84, static_cast<uint32_t>(r.checkpoint_data.size()));
  }
  out.reserve(header + r.args_hash.size() + r.owner.size() +
              r.checkpoint_step.size() + r.checkpoint_data.size() +
              r.result.size());
  out.append(r.args_hash);
  out.append(r.owner);
  if (v2) {
    out.append(r.checkpoint_step);
    out.append(r.checkpoint_data);
  }
  out.append(r.result);
  return out;
}

absl::StatusOr<Record> DecodeRecord(absl::string_view value) {
  absl::StatusOr<RecordView> view = DecodeRecordView(value);
  if (!view.ok()) return view.status();
  view->record.result = std::string(view->result);
  return std::move(view->record);
}

absl::StatusOr<RecordView> DecodeRecordView(absl::string_view value) {
  if (value.size() < kRecordHeaderSize) {
    return absl::DataLossError(absl::StrCat(
        "record: ", value.size(), " bytes, header needs ", kRecordHeaderSize));
  }
  const char* h = value.data();
  const uint8_t version = static_cast<uint8_t>(h[0]);
  if (version != kRecordFormatVersion && version != kRecordFormatVersion2) {
    return absl::DataLossError(
        absl::StrCat("record: unknown format version ", version));
  }
  const bool v2 = version == kRecordFormatVersion2;
  const size_t header = v2 ? kRecordHeaderSizeV2 : kRecordHeaderSize;
  if (value.size() < header) {
    return absl::DataLossError(absl::StrCat("record: ", value.size(),
                                            " bytes, version ", version,
                                            " header needs ", header));
  }
  const uint8_t state = static_cast<uint8_t>(h[1]);
  const uint8_t outcome = static_cast<uint8_t>(h[2]);
  if (state != static_cast<uint8_t>(RecordState::kInFlight) &&
      state != static_cast<uint8_t>(RecordState::kCompleted)) {
    return absl::DataLossError(absl::StrCat("record: bad state ", state));
  }
  if (outcome > static_cast<uint8_t>(Outcome::kError)) {
    return absl::DataLossError(absl::StrCat("record: bad outcome ", outcome));
  }
  Record r;
  r.state = static_cast<RecordState>(state);
  r.outcome = static_cast<Outcome>(outcome);
  r.attempts = DecodeFixed32(h + 4);
  r.expire_at_ms = DecodeInt64(h + kExpireAtOffset);
  r.lease_until_ms = DecodeInt64(h + 16);
  r.fence = DecodeFixed64(h + 24);
  r.created_at_ms = DecodeInt64(h + 32);
  r.completed_at_ms = DecodeInt64(h + 40);
  r.ttl_s = DecodeFixed32(h + 48);
  const size_t hash_len = DecodeFixed16(h + 52);
  const size_t owner_len = DecodeFixed16(h + 54);
  size_t step_len = 0;
  size_t data_len = 0;
  if (v2) {
    r.retain_until_ms = DecodeInt64(h + kRetainUntilOffset);
    r.checkpoint_at_ms = DecodeInt64(h + 64);
    r.checkpoint_fence = DecodeFixed64(h + 72);
    step_len = DecodeFixed16(h + 80);
    data_len = DecodeFixed32(h + 84);
  }
  // Lengths are at most 16 + 32 bits: the sum cannot overflow size_t.
  if (value.size() - header < hash_len + owner_len + step_len + data_len) {
    return absl::DataLossError("record: truncated args_hash/owner/checkpoint");
  }
  absl::string_view rest = value.substr(header);
  r.args_hash = std::string(rest.substr(0, hash_len));
  rest.remove_prefix(hash_len);
  r.owner = std::string(rest.substr(0, owner_len));
  rest.remove_prefix(owner_len);
  r.checkpoint_step = std::string(rest.substr(0, step_len));
  rest.remove_prefix(step_len);
  r.checkpoint_data = std::string(rest.substr(0, data_len));
  rest.remove_prefix(data_len);
  return RecordView{std::move(r), rest};
}

std::optional<int64_t> PeekExpireAt(absl::string_view value) {
  if (!IsKnownVersion(value)) return std::nullopt;
  return DecodeInt64(value.data() + kExpireAtOffset);
}

std::optional<int64_t> PeekDropAt(absl::string_view value) {
  if (!IsKnownVersion(value)) return std::nullopt;
  const int64_t expire_at = DecodeInt64(value.data() + kExpireAtOffset);
  if (static_cast<uint8_t>(value[0]) != kRecordFormatVersion2) return expire_at;
  const int64_t retain_until = DecodeInt64(value.data() + kRetainUntilOffset);
  return retain_until != 0 && retain_until > expire_at ? retain_until
                                                       : expire_at;
}

std::optional<LeaseHeader> PeekLeaseHeader(absl::string_view value) {
  if (!IsKnownVersion(value)) return std::nullopt;
  const uint8_t state = static_cast<uint8_t>(value[1]);
  if (state != static_cast<uint8_t>(RecordState::kInFlight) &&
      state != static_cast<uint8_t>(RecordState::kCompleted)) {
    return std::nullopt;
  }
  LeaseHeader header;
  header.state = static_cast<RecordState>(state);
  header.expire_at_ms = DecodeInt64(value.data() + kExpireAtOffset);
  header.lease_until_ms = DecodeInt64(value.data() + 16);
  return header;
}

}  // namespace dedup
