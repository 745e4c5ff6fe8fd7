// Drives the authority's state machine (storage/authority.h) and a small
// reference model of the API contract with the same random operation
// sequence, and compares every answer and every stored record.
//
// The model (authority_model.h) is written from DESIGN.md "The API
// contract" and the comments of authority.h, not from authority.cc.
//
// The harness plays the store around the authority the way storage/ does:
// records are kept as encoded bytes (storage/record.h) and decoded for each
// call, expired records stay until a "compaction" drops them with the real
// ShouldDropExpired, fences come from one node-wide counter, and the clock
// moves by fuzzed amounts, sometimes backwards (never by more than the
// compaction grace, the step the filter is designed to tolerate).
//
// Input: 3 bytes per operation (see Op). Extra invariants, independent of the
// model: fences strictly increase per key across takeovers, releases,
// forgets and expiry; a written record never expires before its lease ends
// nor before ttl after the write.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/authority.h"
#include "storage/record.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"
#include "tests/fuzz/authority_model.h"
#include "tests/fuzz/fuzz_check.h"

namespace dedup {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kGraceMs = 60'000;
using fuzz::Model;
using fuzz::ModelBegin;
using fuzz::ModelFenced;
using fuzz::ModelRecord;
constexpr int kKeys = Model::kKeys;

// Values chosen around the boundaries the rules compare against: the IN_USE
// retry cap (1000 ms), the smallest lease and TTL the API accepts, the
// largest ones.
constexpr std::array<int64_t, 8> kLeaseMs = {100,  250,  999,    1000,
                                             1001, 5000, 60'000, 3'600'000};
constexpr std::array<uint32_t, 8> kTtlS = {1,  2,    3,      5,
                                           60, 3600, 86'400, 2'592'000};
constexpr std::array<int64_t, 16> kStepMs = {
    0,    1,    2,    99,   100,    101,    250,       999,
    1000, 1001, 2000, 5000, 60'000, 61'000, 3'600'000, 86'400'000};
constexpr std::array<const char*, 4> kOwners = {"", "a", "b", "c"};
constexpr std::array<const char*, 2> kHashes = {"h1", "h2"};
constexpr std::array<const char*, 2> kResults = {"", "r"};

// ---------------------------------------------------------------------------
// Comparison helpers.

void CheckSame(const Record& r, const ModelRecord& m) {
  FUZZ_CHECK(r.state ==
             (m.completed ? RecordState::kCompleted : RecordState::kInFlight));
  FUZZ_CHECK(r.args_hash == m.args_hash);
  FUZZ_CHECK(r.owner == m.owner);
  FUZZ_CHECK(r.outcome == m.outcome);
  FUZZ_CHECK(r.result == m.result);
  FUZZ_CHECK(r.fence == m.fence);
  FUZZ_CHECK(r.created_at_ms == m.created_at);
  FUZZ_CHECK(r.completed_at_ms == m.completed_at);
  FUZZ_CHECK(r.lease_until_ms == m.lease_until);
  FUZZ_CHECK(r.expire_at_ms == m.expire_at);
  FUZZ_CHECK(r.ttl_s == m.ttl_s);
  FUZZ_CHECK(r.attempts == m.attempts);
}

// Reads fuzz bytes; zeros once they run out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool more() const { return pos_ < size_; }
  uint8_t Next() { return pos_ < size_ ? data_[pos_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// One operation, 3 bytes:
//   b0: bits 0-2 kind, 3-4 key (mod 3), 5-6 owner, 7 args_hash
//   b1: bits 0-2 lease, 3-5 ttl, 6 outcome, 7 result
//   b2: bits 0-3 clock step, 4 step backwards, 5-6 which fence, 7 Complete
//       passes a ttl (else 0: keep the Begin's)
struct Op {
  enum Kind {
    kBegin,
    kComplete,
    kRelease,
    kRenew,
    kGet,
    kForget,
    kCompact,
    kBeginToo
  };
  int kind;
  int key;
  std::string owner;
  std::string args_hash;
  int64_t lease_ms;
  uint32_t ttl_s;
  Outcome outcome;
  std::string result;
  int64_t step_ms;
  bool backwards;
  int fence_choice;
  bool complete_ttl;

  static Op Read(Bytes& in) {
    const uint8_t b0 = in.Next(), b1 = in.Next(), b2 = in.Next();
    Op op;
    op.kind = b0 & 7;
    op.key = ((b0 >> 3) & 3) % kKeys;
    op.owner = kOwners[(b0 >> 5) & 3];
    op.args_hash = kHashes[b0 >> 7];
    op.lease_ms = kLeaseMs[b1 & 7];
    op.ttl_s = kTtlS[(b1 >> 3) & 7];
    op.outcome = (b1 & 0x40) ? Outcome::kError : Outcome::kSuccess;
    op.result = kResults[b1 >> 7];
    op.step_ms = kStepMs[b2 & 15];
    op.backwards = (b2 & 0x10) != 0;
    op.fence_choice = (b2 >> 5) & 3;
    op.complete_ttl = (b2 & 0x80) != 0;
    return op;
  }
};

class Harness {
 public:
  void Apply(const Op& op) {
    AdvanceClock(op);
    switch (op.kind) {
      case Op::kBegin:
      case Op::kBeginToo:
        Begin(op);
        break;
      case Op::kComplete:
        Complete(op);
        break;
      case Op::kRelease:
        Release(op);
        break;
      case Op::kRenew:
        Renew(op);
        break;
      case Op::kGet:
        break;  // every step ends with the read checks below
      case Op::kForget:
        stored_[op.key].reset();
        model_.Forget(op.key);
        break;
      case Op::kCompact:
        Compact();
        break;
    }
    CheckState();
  }

 private:
  void AdvanceClock(const Op& op) {
    if (!op.backwards) {
      now_ += op.step_ms;
    } else {
      // A clock step backwards, bounded by what the compaction grace
      // covers (see ttl_compaction_filter.h).
      now_ = std::max(now_ - op.step_ms, high_water_ - kGraceMs + 1);
    }
    high_water_ = std::max(high_water_, now_);
  }

  std::optional<Record> Stored(int key) const {
    if (!stored_[key].has_value()) return std::nullopt;
    absl::StatusOr<Record> r = DecodeRecord(*stored_[key]);
    FUZZ_CHECK(r.ok());
    return *std::move(r);
  }

  void Write(int key, WriteKind write, const Record& r) {
    if (write == WriteKind::kPut) stored_[key] = EncodeRecord(r);
    if (write == WriteKind::kDelete) stored_[key].reset();
  }

  // The fence a client would send: the key's current one, one it was given
  // by an earlier Begin, an older one, or one never issued. Never 0 (the API
  // refuses it).
  uint64_t FenceFor(const Op& op) const {
    const std::optional<ModelRecord>& m = model_.At(op.key);
    uint64_t fence = 0;
    switch (op.fence_choice) {
      case 0:
        fence = m.has_value() ? m->fence : last_given_[op.key];
        break;
      case 1:
        fence = last_given_[op.key];
        break;
      case 2:
        fence = previous_given_[op.key];
        break;
      case 3:
        fence = last_given_[op.key] + 1;
        break;
    }
    return fence == 0 ? 1 : fence;
  }

  void CheckWritten(const Record& r) {
    FUZZ_CHECK(r.expire_at_ms >= r.lease_until_ms);
    FUZZ_CHECK(r.expire_at_ms >= now_ + int64_t{r.ttl_s} * 1000);
  }

  void Begin(const Op& op) {
    uint64_t issued = 0;
    int calls = 0;
    const uint64_t expected_fence = fence_counter_ + 1;
    BeginParams params;
    params.args_hash = op.args_hash;
    params.owner = op.owner;
    params.lease_ms = op.lease_ms;
    params.ttl_s = op.ttl_s;
    const BeginDecision d =
        DecideBegin(Stored(op.key), params, now_, [&]() -> uint64_t {
          ++calls;
          issued = ++fence_counter_;
          return issued;
        });
    const ModelBegin m =
        model_.Begin(op.key, op.args_hash, op.owner, op.lease_ms, op.ttl_s,
                     now_, expected_fence);
    FUZZ_CHECK(d.status == m.status);
    FUZZ_CHECK(d.takeover == m.takeover);
    FUZZ_CHECK(d.reentry == m.reentry);
    FUZZ_CHECK(d.write == (m.writes ? WriteKind::kPut : WriteKind::kNone));
    FUZZ_CHECK(calls == (m.new_fence ? 1 : 0));
    if (d.status == BeginStatus::kInUse) {
      FUZZ_CHECK(d.retry_after_ms == m.retry_after_ms);
    }
    CheckSame(d.record, m.record);
    if (m.new_fence) {
      // Fences only go up for a key, whatever happened to it before.
      FUZZ_CHECK(issued > max_fence_[op.key]);
      max_fence_[op.key] = issued;
    }
    if (d.status == BeginStatus::kStarted) {
      if (d.record.fence != last_given_[op.key]) {
        previous_given_[op.key] = last_given_[op.key];
        last_given_[op.key] = d.record.fence;
      }
    }
    if (d.write == WriteKind::kPut) CheckWritten(d.record);
    Write(op.key, d.write, d.record);
  }

  void CheckFenced(const FencedDecision& d, const ModelFenced& m,
                   bool record_meaningful) {
    FUZZ_CHECK(d.status == m.status);
    FUZZ_CHECK(d.write == m.write);
    if (d.status != FencedStatus::kNotFound && record_meaningful) {
      CheckSame(d.record, m.record);
    }
    if (d.write == WriteKind::kPut) CheckWritten(d.record);
  }

  void Complete(const Op& op) {
    CompleteParams params;
    params.fence = FenceFor(op);
    params.outcome = op.outcome;
    params.result = op.result;
    params.ttl_s = op.complete_ttl ? op.ttl_s : 0;
    const FencedDecision d = DecideComplete(Stored(op.key), params, now_);
    const ModelFenced m = model_.Complete(op.key, params.fence, op.outcome,
                                          op.result, params.ttl_s, now_);
    CheckFenced(d, m, true);
    Write(op.key, d.write, d.record);
  }

  void Release(const Op& op) {
    const uint64_t fence = FenceFor(op);
    const FencedDecision d = DecideRelease(Stored(op.key), fence, now_);
    const ModelFenced m = model_.Release(op.key, fence, now_);
    CheckFenced(d, m, d.status != FencedStatus::kOk);
    Write(op.key, d.write, d.record);
  }

  void Renew(const Op& op) {
    const uint64_t fence = FenceFor(op);
    const FencedDecision d =
        DecideRenew(Stored(op.key), fence, op.lease_ms, now_);
    const ModelFenced m = model_.Renew(op.key, fence, op.lease_ms, now_);
    CheckFenced(d, m, true);
    Write(op.key, d.write, d.record);
  }

  // RocksDB's compaction: drops what the real filter drops.
  void Compact() {
    for (int key = 0; key < kKeys; ++key) {
      if (stored_[key].has_value() &&
          ShouldDropExpired(EncodeStorageKey("ns", std::to_string(key)),
                            *stored_[key], now_, kGraceMs)) {
        stored_[key].reset();
      }
    }
  }

  // After each step: readers see the same thing in the store and the model
  // (an expired record in the store is the same as none), and what the
  // store still holds is exactly the model's record.
  void CheckState() const {
    for (int key = 0; key < kKeys; ++key) {
      const std::optional<Record> stored = Stored(key);
      const std::optional<Record> live = LiveRecord(stored, now_);
      const std::optional<ModelRecord> model_live = model_.Live(key, now_);
      FUZZ_CHECK(live.has_value() == model_live.has_value());
      if (live.has_value()) CheckSame(*live, *model_live);
      if (stored.has_value()) {
        FUZZ_CHECK(model_.At(key).has_value());
        CheckSame(*stored, *model_.At(key));
      }
    }
  }

  Model model_;
  std::array<std::optional<std::string>, kKeys> stored_;
  int64_t now_ = kT0;
  int64_t high_water_ = kT0;
  uint64_t fence_counter_ = 0;
  std::array<uint64_t, kKeys> max_fence_{};
  std::array<uint64_t, kKeys> last_given_{};
  std::array<uint64_t, kKeys> previous_given_{};
};

}  // namespace
}  // namespace dedup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dedup::Bytes in(data, size);
  dedup::Harness harness;
  while (in.more()) harness.Apply(dedup::Op::Read(in));
  return 0;
}
