// Fuzzes the Raft log entry codec (storage/log_entry.h): every replica
// decodes these bytes, so a malformed entry must be refused, never crash or
// be misread.
//
// Each input is decoded twice: as it is (almost always refused by the
// checksum), and with a valid checksum appended, so the fuzzer reaches the
// body's decoder. The checksum is FNV-1a 64 over the body, little-endian
// (the format log_entry.cc documents).
//
// Invariants: no crash, no read outside the input, no UB; a refusal is
// DataLossError; the encoding is canonical: a decoded entry re-encodes to the
// bytes it was decoded from, up to the zero padding before the checksum
// (which the decoder accepts in any length below 8), so no field can be
// silently truncated or normalised; the re-encoded bytes are a multiple of 8
// long and decode to the same entry.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/shard_layout_codec.h"
#include "storage/log_entry.h"
#include "tests/fuzz/fuzz_check.h"

namespace dedup {
namespace {

uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string WithChecksum(absl::string_view body) {
  std::string out(body);
  uint64_t h = Fnv1a64(body);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(h >> (8 * i)));
  return out;
}

bool SameFields(const LogBegin& a, const LogBegin& b) {
  return a.skey == b.skey && a.params.args_hash == b.params.args_hash &&
         a.params.owner == b.params.owner &&
         a.params.lease_ms == b.params.lease_ms &&
         a.params.ttl_s == b.params.ttl_s &&
         a.params.accept_rerun == b.params.accept_rerun &&
         a.params.retry_errors == b.params.retry_errors;
}
bool SameFields(const LogComplete& a, const LogComplete& b) {
  return a.skey == b.skey && a.params.fence == b.params.fence &&
         a.params.outcome == b.params.outcome &&
         a.params.result == b.params.result &&
         a.params.ttl_s == b.params.ttl_s &&
         a.params.retention_ms == b.params.retention_ms;
}
bool SameFields(const LogCheckpoint& a, const LogCheckpoint& b) {
  return a.skey == b.skey && a.params.fence == b.params.fence &&
         a.params.step == b.params.step && a.params.data == b.params.data &&
         a.params.lease_ms == b.params.lease_ms;
}
bool SameFields(const LogRelease& a, const LogRelease& b) {
  return a.skey == b.skey && a.fence == b.fence;
}
bool SameFields(const LogRenew& a, const LogRenew& b) {
  return a.skey == b.skey && a.fence == b.fence && a.lease_ms == b.lease_ms;
}
bool SameFields(const LogGet& a, const LogGet& b) { return a.skey == b.skey; }
bool SameFields(const LogForget& a, const LogForget& b) {
  return a.skey == b.skey;
}
bool SameFields(const LogSetMember& a, const LogSetMember& b) {
  return a.member_id == b.member_id && a.client_address == b.client_address;
}
bool SameFields(const LogSetShardMap& a, const LogSetShardMap& b) {
  return a.expected_epoch == b.expected_epoch && a.epoch == b.epoch &&
         a.map == b.map;
}

bool SameOp(const LogOp& a, const LogOp& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&b](const auto& x) {
        return SameFields(x, std::get<std::decay_t<decltype(x)>>(b));
      },
      a);
}

bool SameEntry(const LogEntry& a, const LogEntry& b) {
  if (a.proposer != b.proposer || a.incarnation != b.incarnation ||
      a.sequence != b.sequence || a.now_ms != b.now_ms ||
      a.ops.size() != b.ops.size()) {
    return false;
  }
  for (size_t i = 0; i < a.ops.size(); ++i) {
    if (!SameOp(a.ops[i], b.ops[i])) return false;
  }
  return true;
}

absl::string_view WithoutTrailingZeros(absl::string_view s) {
  while (!s.empty() && s.back() == '\0') s.remove_suffix(1);
  return s;
}

// The meta group's map arrives from other nodes: its bytes decode to a
// valid layout that re-encodes to them, or are refused as DataLoss.
void CheckMap(const LogSetShardMap& op) {
  FUZZ_CHECK(op.epoch > op.expected_epoch);
  absl::StatusOr<ShardLayout> layout = DecodeShardLayout(op.map);
  if (!layout.ok()) {
    FUZZ_CHECK(layout.status().code() == absl::StatusCode::kDataLoss);
    return;
  }
  FUZZ_CHECK(ValidateLayout(*layout).ok());
  FUZZ_CHECK(EncodeShardLayout(*layout) == op.map);
}

void Check(absl::string_view bytes) {
  absl::StatusOr<LogEntry> entry = DecodeLogEntry(bytes);
  if (!entry.ok()) {
    FUZZ_CHECK(entry.status().code() == absl::StatusCode::kDataLoss);
    return;
  }
  for (const LogOp& op : entry->ops) {
    FUZZ_CHECK(TypeOf(op) >= OpType::kBegin &&
               TypeOf(op) <= OpType::kSetShardMap);
    if (const auto* map = std::get_if<LogSetShardMap>(&op)) CheckMap(*map);
    if (const auto* complete = std::get_if<LogComplete>(&op)) {
      FUZZ_CHECK(complete->params.outcome == Outcome::kSuccess ||
                 complete->params.outcome == Outcome::kError);
    }
  }
  const std::string encoded = EncodeLogEntry(*entry);
  FUZZ_CHECK(encoded.size() % 8 == 0);
  // Both bodies (checksum removed) are the same fields followed by zeros,
  // unless the input is of version 1, which is re-encoded as version 2.
  if (bytes[0] == encoded[0]) {
    FUZZ_CHECK(WithoutTrailingZeros(bytes.substr(0, bytes.size() - 8)) ==
               WithoutTrailingZeros(
                   absl::string_view(encoded).substr(0, encoded.size() - 8)));
  }
  absl::StatusOr<LogEntry> again = DecodeLogEntry(encoded);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameEntry(*entry, *again));
  FUZZ_CHECK(EncodeLogEntry(*again) == encoded);
}

}  // namespace
}  // namespace dedup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  dedup::Check(bytes);
  dedup::Check(dedup::WithChecksum(bytes));
  return 0;
}
