#include "storage/log_entry.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dedup {
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
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
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
    uint64_t x = 0;
    for (int i = 7; i >= 0; --i) {
      x = (x << 8) | static_cast<unsigned char>(in_[i]);
    }
    *v = x;
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

void EncodeOp(const LogOp& op, Writer& w) {
  w.U8(static_cast<uint8_t>(op.type));
  w.Bytes(op.skey);
  switch (op.type) {
    case OpType::kBegin:
      w.Bytes(op.begin.args_hash);
      w.Bytes(op.begin.owner);
      w.I64(op.begin.lease_ms);
      w.U64(op.begin.ttl_s);
      w.U8((op.begin.accept_rerun ? 1 : 0) | (op.begin.retry_errors ? 2 : 0));
      break;
    case OpType::kComplete:
      w.U64(op.complete.fence);
      w.U8(static_cast<uint8_t>(op.complete.outcome));
      w.Bytes(op.complete.result);
      w.U64(op.complete.ttl_s);
      w.I64(op.complete.retention_ms);
      break;
    case OpType::kCheckpoint:
      w.U64(op.checkpoint.fence);
      w.Bytes(op.checkpoint.step);
      w.Bytes(op.checkpoint.data);
      w.I64(op.checkpoint.lease_ms);
      break;
    case OpType::kRelease:
      w.U64(op.fence);
      break;
    case OpType::kRenew:
      w.U64(op.fence);
      w.I64(op.lease_ms);
      break;
    case OpType::kSetMember:
      w.U64(op.member_id);
      break;
    case OpType::kGet:
    case OpType::kForget:
      break;
  }
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

bool DecodeOp(Reader& r, uint8_t version, LogOp* op) {
  uint8_t type;
  if (!r.U8(&type) || !r.Bytes(&op->skey)) return false;
  op->type = static_cast<OpType>(type);
  const bool v2 = version >= kLogEntryVersion;
  switch (op->type) {
    case OpType::kBegin: {
      if (!r.Bytes(&op->begin.args_hash) || !r.Bytes(&op->begin.owner) ||
          !r.I64(&op->begin.lease_ms) || !r.U32(&op->begin.ttl_s) ||
          !LeaseInRange(op->begin.lease_ms)) {
        return false;
      }
      uint8_t flags = 0;
      if (v2 && (!r.U8(&flags) || flags > 3)) return false;
      op->begin.accept_rerun = (flags & 1) != 0;
      op->begin.retry_errors = (flags & 2) != 0;
      return true;
    }
    case OpType::kComplete: {
      uint8_t outcome;
      if (!r.U64(&op->complete.fence) || !r.U8(&outcome) ||
          !r.Bytes(&op->complete.result) || !r.U32(&op->complete.ttl_s)) {
        return false;
      }
      if (v2 && (!r.I64(&op->complete.retention_ms) ||
                 op->complete.retention_ms < 0 ||
                 op->complete.retention_ms > kMaxDecodedRetentionMs)) {
        return false;
      }
      if (outcome != static_cast<uint8_t>(Outcome::kSuccess) &&
          outcome != static_cast<uint8_t>(Outcome::kError)) {
        return false;
      }
      op->complete.outcome = static_cast<Outcome>(outcome);
      return true;
    }
    case OpType::kRelease:
      return r.U64(&op->fence);
    case OpType::kRenew:
      return r.U64(&op->fence) && r.I64(&op->lease_ms) &&
             LeaseInRange(op->lease_ms);
    case OpType::kSetMember:
      return r.U64(&op->member_id);
    case OpType::kCheckpoint:
      return v2 && r.U64(&op->checkpoint.fence) &&
             r.Bytes(&op->checkpoint.step) && r.Bytes(&op->checkpoint.data) &&
             r.I64(&op->checkpoint.lease_ms) &&
             LeaseInRange(op->checkpoint.lease_ms);
    case OpType::kGet:
    case OpType::kForget:
      return true;
  }
  return false;  // unknown type
}

}  // namespace

std::string EncodeLogEntry(const LogEntry& entry) {
  std::string out;
  size_t size = 64;
  for (const LogOp& op : entry.ops) {
    size += 64 + op.skey.size() + op.begin.args_hash.size() +
            op.begin.owner.size() + op.complete.result.size() +
            op.checkpoint.step.size() + op.checkpoint.data.size();
  }
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
  entry.ops.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!DecodeOp(r, version, &entry.ops[i])) {
      return absl::DataLossError(
          absl::StrCat("log entry: operation ", i, " is malformed"));
    }
  }
  if (!r.done() && !r.OnlyZerosLeft()) {
    return absl::DataLossError("log entry: trailing bytes");
  }
  return entry;
}

}  // namespace dedup
