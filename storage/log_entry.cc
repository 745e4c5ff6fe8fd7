#include "storage/log_entry.h"

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/coding.h"

namespace dedup {

static_assert(std::is_same_v<std::variant_alternative_t<0, LogOp>, LogBegin>);
static_assert(
    std::is_same_v<std::variant_alternative_t<
                       static_cast<size_t>(OpType::kSetMember) - 1, LogOp>,
                   LogSetMember>);
static_assert(
    std::is_same_v<std::variant_alternative_t<
                       static_cast<size_t>(OpType::kCheckpoint) - 1, LogOp>,
                   LogCheckpoint>);
static_assert(
    std::is_same_v<std::variant_alternative_t<
                       static_cast<size_t>(OpType::kSetShardMap) - 1, LogOp>,
                   LogSetShardMap>);
static_assert(std::variant_size_v<LogOp> ==
              static_cast<size_t>(OpType::kSetShardMap));

namespace {

const std::string* Key(const LogSetMember&) { return nullptr; }
const std::string* Key(const LogSetShardMap&) { return nullptr; }
template <typename Op>
const std::string* Key(const Op& op) {
  return &op.skey;
}

size_t VariableBytes(const LogBegin& op) {
  return op.skey.size() + op.params.args_hash.size() + op.params.owner.size();
}
size_t VariableBytes(const LogComplete& op) {
  return op.skey.size() + op.params.result.size();
}
size_t VariableBytes(const LogCheckpoint& op) {
  return op.skey.size() + op.params.step.size() + op.params.data.size();
}
size_t VariableBytes(const LogSetMember& op) {
  return op.client_address.size();
}
size_t VariableBytes(const LogSetShardMap& op) { return op.map.size(); }
template <typename Op>
size_t VariableBytes(const Op& op) {
  return op.skey.size();
}

}  // namespace

const std::string* KeyOf(const LogOp& op) {
  return std::visit([](const auto& o) { return Key(o); }, op);
}

size_t EstimatedBytes(const LogOp& op) {
  return 64 + std::visit([](const auto& o) { return VariableBytes(o); }, op);
}

namespace {

// Version 2 added Begin's flags (accept_rerun, retry_errors), Complete's
// retention_ms and the
// Checkpoint operation. Version 1 entries (in logs written before) still
// decode, with those fields at their defaults.
constexpr uint8_t kLogEntryVersion1 = 1;
constexpr uint8_t kLogEntryVersion = 2;

// FNV-1a 64: not cryptographic, enough to catch damaged bytes.
uint64_t Checksum(absl::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U64(uint64_t v) { PutFixed64(out_, v); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bytes(absl::string_view s) {
    U64(s.size());
    out_->append(s.data(), s.size());
  }

 private:
  std::string* const out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U8(uint8_t* v) {
    if (in_.empty()) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = DecodeFixed64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  bool I64(int64_t* v) {
    uint64_t x;
    if (!U64(&x)) return false;
    *v = static_cast<int64_t>(x);
    return true;
  }
  bool U32(uint32_t* v) {
    uint64_t x;
    if (!U64(&x) || x > UINT32_MAX) return false;
    *v = static_cast<uint32_t>(x);
    return true;
  }
  bool Bytes(std::string* s) {
    uint64_t n;
    if (!U64(&n) || n > in_.size()) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }
  // True when what is left is padding: fewer than 8 zero bytes.
  bool OnlyZerosLeft() const {
    return in_.size() < 8 &&
           in_.find_first_not_of('\0') == absl::string_view::npos;
  }

 private:
  absl::string_view in_;
};

// The fields after the type and the key, per operation.
void EncodeFields(const LogBegin& op, Writer& w) {
  w.Bytes(op.params.args_hash);
  w.Bytes(op.params.owner);
  w.I64(op.params.lease_ms);
  w.U64(op.params.ttl_s);
  w.U8((op.params.accept_rerun ? 1 : 0) | (op.params.retry_errors ? 2 : 0));
}
void EncodeFields(const LogComplete& op, Writer& w) {
  w.U64(op.params.fence);
  w.U8(static_cast<uint8_t>(op.params.outcome));
  w.Bytes(op.params.result);
  w.U64(op.params.ttl_s);
  w.I64(op.params.retention_ms);
}
void EncodeFields(const LogCheckpoint& op, Writer& w) {
  w.U64(op.params.fence);
  w.Bytes(op.params.step);
  w.Bytes(op.params.data);
  w.I64(op.params.lease_ms);
}
void EncodeFields(const LogRelease& op, Writer& w) { w.U64(op.fence); }
void EncodeFields(const LogRenew& op, Writer& w) {
  w.U64(op.fence);
  w.I64(op.lease_ms);
}
void EncodeFields(const LogSetMember& op, Writer& w) { w.U64(op.member_id); }
void EncodeFields(const LogSetShardMap& op, Writer& w) {
  w.U64(op.expected_epoch);
  w.U64(op.epoch);
}
void EncodeFields(const LogGet&, Writer&) {}
void EncodeFields(const LogForget&, Writer&) {}

void EncodeOp(const LogOp& op, Writer& w) {
  w.U8(static_cast<uint8_t>(TypeOf(op)));
  // The key's place holds what an operation on no record carries.
  if (const auto* member = std::get_if<LogSetMember>(&op)) {
    w.Bytes(member->client_address);
  } else if (const auto* map = std::get_if<LogSetShardMap>(&op)) {
    w.Bytes(map->map);
  } else {
    w.Bytes(*KeyOf(op));
  }
  std::visit([&w](const auto& o) { EncodeFields(o, w); }, op);
}

// Leases beyond this (about 35 years) are refused when decoding: replicas
// compute now + lease, which must not overflow whatever a faulty proposer
// wrote (the checksum only proves the bytes are the ones written).
constexpr int64_t kMaxDecodedLeaseMs = int64_t{1} << 40;

bool LeaseInRange(int64_t lease_ms) {
  return lease_ms >= 0 && lease_ms <= kMaxDecodedLeaseMs;
}

// Retention beyond this (about 35 years) is refused when decoding, for the
// same reason: replicas add it to an expiry time.
constexpr int64_t kMaxDecodedRetentionMs = int64_t{1} << 40;

bool DecodeBegin(Reader& r, bool v2, BeginParams* p) {
  if (!r.Bytes(&p->args_hash) || !r.Bytes(&p->owner) || !r.I64(&p->lease_ms) ||
      !r.U32(&p->ttl_s) || !LeaseInRange(p->lease_ms)) {
    return false;
  }
  uint8_t flags = 0;
  if (v2 && (!r.U8(&flags) || flags > 3)) return false;
  p->accept_rerun = (flags & 1) != 0;
  p->retry_errors = (flags & 2) != 0;
  return true;
}

bool DecodeComplete(Reader& r, bool v2, CompleteParams* p) {
  uint8_t outcome;
  if (!r.U64(&p->fence) || !r.U8(&outcome) || !r.Bytes(&p->result) ||
      !r.U32(&p->ttl_s)) {
    return false;
  }
  if (v2 && (!r.I64(&p->retention_ms) || p->retention_ms < 0 ||
             p->retention_ms > kMaxDecodedRetentionMs)) {
    return false;
  }
  if (outcome != static_cast<uint8_t>(Outcome::kSuccess) &&
      outcome != static_cast<uint8_t>(Outcome::kError)) {
    return false;
  }
  p->outcome = static_cast<Outcome>(outcome);
  return true;
}

bool DecodeCheckpoint(Reader& r, bool v2, CheckpointParams* p) {
  return v2 && r.U64(&p->fence) && r.Bytes(&p->step) && r.Bytes(&p->data) &&
         r.I64(&p->lease_ms) && LeaseInRange(p->lease_ms);
}

// The operation of `type` whose key (or client address) is `key`, with
// the fields that follow it; nullopt when they are malformed or the type is
// unknown.
std::optional<LogOp> DecodeFields(Reader& r, bool v2, uint8_t type,
                                  std::string key) {
  switch (static_cast<OpType>(type)) {
    case OpType::kBegin: {
      LogBegin op{std::move(key), {}};
      if (!DecodeBegin(r, v2, &op.params)) return std::nullopt;
      return op;
    }
    case OpType::kComplete: {
      LogComplete op{std::move(key), {}};
      if (!DecodeComplete(r, v2, &op.params)) return std::nullopt;
      return op;
    }
    case OpType::kRelease: {
      LogRelease op{std::move(key)};
      if (!r.U64(&op.fence)) return std::nullopt;
      return op;
    }
    case OpType::kRenew: {
      LogRenew op{std::move(key)};
      if (!r.U64(&op.fence) || !r.I64(&op.lease_ms) ||
          !LeaseInRange(op.lease_ms)) {
        return std::nullopt;
      }
      return op;
    }
    case OpType::kSetMember: {
      LogSetMember op;
      op.client_address = std::move(key);
      if (!r.U64(&op.member_id)) return std::nullopt;
      return op;
    }
    case OpType::kCheckpoint: {
      LogCheckpoint op{std::move(key), {}};
      if (!DecodeCheckpoint(r, v2, &op.params)) return std::nullopt;
      return op;
    }
    case OpType::kSetShardMap: {
      LogSetShardMap op;
      op.map = std::move(key);
      if (!v2 || !r.U64(&op.expected_epoch) || !r.U64(&op.epoch) ||
          op.epoch <= op.expected_epoch) {
        return std::nullopt;
      }
      return op;
    }
    case OpType::kGet:
      return LogGet{std::move(key)};
    case OpType::kForget:
      return LogForget{std::move(key)};
  }
  return std::nullopt;  // unknown type
}

std::optional<LogOp> DecodeOp(Reader& r, uint8_t version) {
  uint8_t type;
  std::string key;
  if (!r.U8(&type) || !r.Bytes(&key)) return std::nullopt;
  return DecodeFields(r, version >= kLogEntryVersion, type, std::move(key));
}

}  // namespace

std::string EncodeLogEntry(const LogEntry& entry) {
  std::string out;
  size_t size = 64;
  for (const LogOp& op : entry.ops) size += EstimatedBytes(op);
  out.reserve(size);
  Writer w(&out);
  w.U8(kLogEntryVersion);
  w.U64(entry.proposer);
  w.U64(entry.incarnation);
  w.U64(entry.sequence);
  w.I64(entry.now_ms);
  w.U64(entry.ops.size());
  for (const LogOp& op : entry.ops) EncodeOp(op, w);
  // Zero padding to a multiple of 8 bytes with the checksum: libraft 0.15
  // pads entries to 8 bytes in its batches and was seen to hand later
  // entries of a multi-entry batch read from disk back misaligned when
  // their lengths were not multiples of 8.
  out.append((8 - (out.size() + 8) % 8) % 8, '\0');
  // A checksum, so that bytes damaged anywhere between the proposer and
  // this replica are refused instead of applied.
  w.U64(Checksum(out));
  return out;
}

absl::StatusOr<LogEntry> DecodeLogEntry(absl::string_view bytes) {
  if (bytes.size() < 9) return absl::DataLossError("log entry: truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored_checksum = 0;
  Reader(bytes.substr(body.size())).U64(&stored_checksum);
  if (stored_checksum != Checksum(body)) {
    return absl::DataLossError("log entry: checksum mismatch (damaged bytes)");
  }
  bytes = body;
  Reader r(bytes);
  LogEntry entry;
  uint8_t version;
  uint64_t count;
  if (!r.U8(&version)) return absl::DataLossError("log entry: empty");
  if (version != kLogEntryVersion && version != kLogEntryVersion1) {
    return absl::DataLossError(
        absl::StrCat("log entry: unknown version ", version));
  }
  if (!r.U64(&entry.proposer) || !r.U64(&entry.incarnation) ||
      !r.U64(&entry.sequence) || !r.I64(&entry.now_ms) || !r.U64(&count) ||
      count > bytes.size()) {
    return absl::DataLossError("log entry: truncated header");
  }
  entry.ops.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::optional<LogOp> op = DecodeOp(r, version);
    if (!op.has_value()) {
      return absl::DataLossError(
          absl::StrCat("log entry: operation ", i, " is malformed"));
    }
    entry.ops.push_back(*std::move(op));
  }
  if (!r.done() && !r.OnlyZerosLeft()) {
    return absl::DataLossError("log entry: trailing bytes");
  }
  return entry;
}

}  // namespace dedup
