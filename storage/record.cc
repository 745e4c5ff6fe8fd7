#include "storage/record.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

// Explicit byte order so the format does not depend on the host.
template <typename T>
void PutLittleEndian(char* dst, T value) {
  using U = std::make_unsigned_t<T>;
  U v = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); ++i) {
    dst[i] = static_cast<char>(v & 0xff);
    v = static_cast<U>(v >> 8);
  }
}

template <typename T>
T GetLittleEndian(const char* src) {
  using U = std::make_unsigned_t<T>;
  U v = 0;
  for (size_t i = sizeof(T); i-- > 0;) {
    v = static_cast<U>((v << 8) | static_cast<unsigned char>(src[i]));
  }
  return static_cast<T>(v);
}

}  // namespace

bool operator==(const Record& a, const Record& b) {
  return a.state == b.state && a.outcome == b.outcome &&
         a.attempts == b.attempts && a.expire_at_ms == b.expire_at_ms &&
         a.lease_until_ms == b.lease_until_ms && a.fence == b.fence &&
         a.created_at_ms == b.created_at_ms &&
         a.completed_at_ms == b.completed_at_ms && a.ttl_s == b.ttl_s &&
         a.args_hash == b.args_hash && a.owner == b.owner &&
         a.result == b.result;
}

std::string EncodeRecord(const Record& r) {
  std::string out(kRecordHeaderSize, '\0');
  char* h = out.data();
  h[0] = static_cast<char>(kRecordFormatVersion);
  h[1] = static_cast<char>(r.state);
  h[2] = static_cast<char>(r.outcome);
  PutLittleEndian<uint32_t>(h + 4, r.attempts);
  PutLittleEndian<int64_t>(h + kExpireAtOffset, r.expire_at_ms);
  PutLittleEndian<int64_t>(h + 16, r.lease_until_ms);
  PutLittleEndian<uint64_t>(h + 24, r.fence);
  PutLittleEndian<int64_t>(h + 32, r.created_at_ms);
  PutLittleEndian<int64_t>(h + 40, r.completed_at_ms);
  PutLittleEndian<uint32_t>(h + 48, r.ttl_s);
  PutLittleEndian<uint16_t>(h + 52, static_cast<uint16_t>(r.args_hash.size()));
  PutLittleEndian<uint16_t>(h + 54, static_cast<uint16_t>(r.owner.size()));
  out.reserve(kRecordHeaderSize + r.args_hash.size() + r.owner.size() +
              r.result.size());
  out.append(r.args_hash);
  out.append(r.owner);
  out.append(r.result);
  return out;
}

absl::StatusOr<Record> DecodeRecord(absl::string_view value) {
  if (value.size() < kRecordHeaderSize) {
    return absl::DataLossError(absl::StrCat(
        "record: ", value.size(), " bytes, header needs ", kRecordHeaderSize));
  }
  const char* h = value.data();
  if (static_cast<uint8_t>(h[0]) != kRecordFormatVersion) {
    return absl::DataLossError(absl::StrCat("record: unknown format version ",
                                            static_cast<uint8_t>(h[0])));
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
  r.attempts = GetLittleEndian<uint32_t>(h + 4);
  r.expire_at_ms = GetLittleEndian<int64_t>(h + kExpireAtOffset);
  r.lease_until_ms = GetLittleEndian<int64_t>(h + 16);
  r.fence = GetLittleEndian<uint64_t>(h + 24);
  r.created_at_ms = GetLittleEndian<int64_t>(h + 32);
  r.completed_at_ms = GetLittleEndian<int64_t>(h + 40);
  r.ttl_s = GetLittleEndian<uint32_t>(h + 48);
  const size_t hash_len = GetLittleEndian<uint16_t>(h + 52);
  const size_t owner_len = GetLittleEndian<uint16_t>(h + 54);
  if (value.size() < kRecordHeaderSize + hash_len + owner_len) {
    return absl::DataLossError("record: truncated args_hash/owner");
  }
  absl::string_view rest = value.substr(kRecordHeaderSize);
  r.args_hash = std::string(rest.substr(0, hash_len));
  r.owner = std::string(rest.substr(hash_len, owner_len));
  r.result = std::string(rest.substr(hash_len + owner_len));
  return r;
}

std::optional<int64_t> PeekExpireAt(absl::string_view value) {
  if (value.size() < kRecordHeaderSize ||
      static_cast<uint8_t>(value[0]) != kRecordFormatVersion) {
    return std::nullopt;
  }
  return GetLittleEndian<int64_t>(value.data() + kExpireAtOffset);
}

std::optional<LeaseHeader> PeekLeaseHeader(absl::string_view value) {
  if (value.size() < kRecordHeaderSize ||
      static_cast<uint8_t>(value[0]) != kRecordFormatVersion) {
    return std::nullopt;
  }
  const uint8_t state = static_cast<uint8_t>(value[1]);
  if (state != static_cast<uint8_t>(RecordState::kInFlight) &&
      state != static_cast<uint8_t>(RecordState::kCompleted)) {
    return std::nullopt;
  }
  LeaseHeader header;
  header.state = static_cast<RecordState>(state);
  header.expire_at_ms =
      GetLittleEndian<int64_t>(value.data() + kExpireAtOffset);
  header.lease_until_ms = GetLittleEndian<int64_t>(value.data() + 16);
  return header;
}

}  // namespace dedup
