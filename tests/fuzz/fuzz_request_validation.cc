// Fuzzes what the server does with a request before storage sees it: the
// protobuf parse of each dedup.v1 request, its validation (server/limits.h)
// and the conversions of server/proto_convert.h.
//
// Input layout: byte 0 picks the method (the Method order of limits.h:
// Begin, Complete, Release, Renew, Get, Forget, BeginBatch, CompleteBatch,
// Checkpoint, CheckpointBatch),
// byte 1 a set of Limits (the defaults, a tight set, a wide set), the rest is
// the serialized request.
//
// Invariants:
// - nothing crashes, no UB; validation answers OK or INVALID_ARGUMENT whose
//   message starts with "<field>: " for a field ValidatedFieldsOf(method)
//   lists;
// - validation accepts exactly what an independent reading of the documented
//   limits (limits_reference.h) accepts, and names the same first bad field;
// - an accepted request has every field within Limits once the zero defaults
//   are resolved; it survives a serialize/parse round trip unchanged;
// - conversions: the storage params made from it travel through the Raft log
//   encoding unchanged, the authority's answer to it is rendered by the
//   Fill*Response functions field for field, FillRecord renders the record
//   field for field, Outcome round-trips through ToProto/FromProto, and
//   ToGrpcStatus keeps code and message.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "dedup/v1/dedup.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/limits.h"
#include "server/proto_convert.h"
#include "storage/authority.h"
#include "storage/log_entry.h"
#include "storage/record.h"
#include "storage/storage_key.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/limits_reference.h"

namespace dedup {
namespace {

constexpr int64_t kNowMs = 1'700'000'000'000;
using fuzz::BadBegin;
using fuzz::BadCheckpoint;
using fuzz::BadComplete;
using fuzz::BadRelease;
using fuzz::BadRenew;
using fuzz::BadTarget;

enum Method {
  kBegin = 0,
  kComplete,
  kRelease,
  kRenew,
  kGet,
  kForget,
  kBeginBatch,
  kCompleteBatch,
  kCheckpoint,
  kCheckpointBatch,
  kMethodCount
};

Limits LimitsFor(uint8_t choice) {
  Limits l;  // the defaults
  switch (choice % 3) {
    case 1:  // tight: every boundary within a few bytes of the seeds
      l.max_key_bytes = 4;
      l.max_namespace_bytes = 3;
      l.max_owner_bytes = 2;
      l.max_args_hash_bytes = 4;
      l.max_result_bytes = 8;
      l.min_ttl_s = 2;
      l.default_ttl_s = 3;
      l.max_ttl_s = 5;
      l.min_lease_ms = 200;
      l.default_lease_ms = 250;
      l.max_lease_ms = 300;
      l.max_wait_ms = 10;
      l.max_batch_items = 3;
      l.max_checkpoint_step_bytes = 3;
      l.max_checkpoint_data_bytes = 4;
      break;
    case 2:  // wide: the largest values Limits::Check allows
      l.max_key_bytes = 4096;
      l.max_namespace_bytes = 255;
      l.max_owner_bytes = 4096;
      l.max_args_hash_bytes = 4096;
      // max_result_bytes stays 1 MiB: no input is that long (-max_len).
      l.min_ttl_s = 1;
      l.default_ttl_s = 1;
      l.max_ttl_s = UINT32_MAX;
      l.min_lease_ms = 1;
      l.default_lease_ms = UINT32_MAX;
      l.max_lease_ms = UINT32_MAX;
      l.max_wait_ms = UINT32_MAX;
      l.max_batch_items = 100'000;
      break;
    default:
      break;
  }
  // A preset that Limits::Check refuses (a new rule between fields) must be
  // fixed here, not silently replaced by the defaults.
  FUZZ_CHECK(l.Check().ok());
  return l;
}

// `status` is the real validation's answer, `expected_bad` the reference's.
void CheckVerdict(const absl::Status& status,
                  const std::optional<std::string>& expected_bad, int method) {
  const grpc::Status g = ToGrpcStatus(status);
  FUZZ_CHECK(static_cast<int>(g.error_code()) ==
             static_cast<int>(status.code()));
  FUZZ_CHECK(g.error_message() == status.message());
  if (!expected_bad.has_value()) {
    FUZZ_CHECK(status.ok());
    return;
  }
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  FUZZ_CHECK(absl::StartsWith(status.message(), *expected_bad + ": "));
  bool listed = false;
  for (absl::string_view f : ValidatedFieldsOf(method)) {
    listed = listed || f == *expected_bad;
  }
  FUZZ_CHECK(listed);
}

// A batch's item count against the reference rule (1..max_batch_items).
void CheckBatchSize(int items, const Limits& l, int method) {
  const bool size_ok =
      items >= 1 && static_cast<uint32_t>(items) <= l.max_batch_items;
  CheckVerdict(ValidateBatchSize(items, l),
               size_ok ? std::nullopt : std::optional<std::string>("items"),
               method);
}

template <typename Message>
void CheckReparse(const Message& m) {
  const std::string wire = m.SerializeAsString();
  Message again;
  FUZZ_CHECK(again.ParseFromString(wire));
  FUZZ_CHECK(again.SerializeAsString() == wire);
}

// The storage operation made from a request crosses the Raft log unchanged.
template <typename Op>
Op ThroughLog(const Op& op) {
  LogEntry entry;
  entry.now_ms = kNowMs;
  entry.ops.push_back(op);
  absl::StatusOr<LogEntry> decoded = DecodeLogEntry(EncodeLogEntry(entry));
  FUZZ_CHECK(decoded.ok() && decoded->ops.size() == 1 &&
             std::holds_alternative<Op>(decoded->ops[0]));
  return std::get<Op>(decoded->ops[0]);
}

void CheckRecordRendering(const Record& r) {
  v1::Record p;
  FillRecord(r, &p);
  CheckReparse(p);
  FUZZ_CHECK(p.state() == (r.state == RecordState::kCompleted ? v1::COMPLETED
                                                              : v1::IN_FLIGHT));
  FUZZ_CHECK(p.fence() == r.fence);
  FUZZ_CHECK(p.args_hash() == r.args_hash);
  FUZZ_CHECK(p.owner() == r.owner);
  FUZZ_CHECK(FromProto(p.outcome()) == r.outcome);
  FUZZ_CHECK(p.result() == r.result);
  FUZZ_CHECK(p.created_at() == r.created_at_ms);
  FUZZ_CHECK(p.completed_at() == r.completed_at_ms);
  FUZZ_CHECK(p.expires_at() == r.expire_at_ms);
  FUZZ_CHECK(p.lease_expires_at() ==
             (r.state == RecordState::kInFlight ? r.lease_until_ms : 0));
  FUZZ_CHECK(p.attempts() == r.attempts);
}

// Mirrors DedupService::BeginParamsOf (a member of the service class).
BeginParams BeginParamsFrom(const v1::BeginRequest& r, const Limits& l) {
  BeginParams p;
  p.args_hash = r.args_hash();
  p.owner = r.owner();
  p.lease_ms = ResolveLease(r.lease_ms(), l);
  p.ttl_s = ResolveTtl(r.ttl_s(), l);
  return p;
}

// Mirrors DedupService::CompleteParamsOf.
CompleteParams CompleteParamsFrom(const v1::CompleteRequest& r) {
  CompleteParams p;
  p.fence = r.fence();
  p.outcome = FromProto(r.outcome());
  p.result = r.result();
  p.ttl_s = r.ttl_s();
  return p;
}

// A record in flight under `fence`, as a Begin at kNowMs left it.
Record InFlight(uint64_t fence, const Limits& l) {
  BeginParams p;
  p.owner = "o";
  p.lease_ms = l.default_lease_ms;
  p.ttl_s = l.default_ttl_s;
  return DecideBegin(std::nullopt, p, kNowMs, [fence] { return fence; }).record;
}

void CheckValidBegin(const v1::BeginRequest& r, const Limits& l) {
  const BeginParams params = BeginParamsFrom(r, l);
  FUZZ_CHECK(params.lease_ms >= l.min_lease_ms &&
             params.lease_ms <= l.max_lease_ms);
  FUZZ_CHECK(params.ttl_s >= l.min_ttl_s && params.ttl_s <= l.max_ttl_s);

  const LogBegin op{EncodeStorageKey(r.namespace_(), r.key()), params};
  const LogBegin logged = ThroughLog(op);
  FUZZ_CHECK(logged.skey == op.skey &&
             logged.params.args_hash == params.args_hash &&
             logged.params.owner == params.owner &&
             logged.params.lease_ms == params.lease_ms &&
             logged.params.ttl_s == params.ttl_s);

  BeginResult result;
  result.decision = DecideBegin(std::nullopt, logged.params, kNowMs,
                                [] { return uint64_t{7}; });
  v1::BeginResponse resp;
  FillBeginResponse(result, &resp);
  CheckReparse(resp);
  FUZZ_CHECK(resp.status() == v1::BeginResponse::STARTED);
  FUZZ_CHECK(resp.fence() == 7);
  FUZZ_CHECK(!resp.takeover());
  FUZZ_CHECK(resp.created_at() == kNowMs);
  FUZZ_CHECK(resp.lease_expires_at() == kNowMs + params.lease_ms);
  FUZZ_CHECK(resp.expires_at() >= resp.lease_expires_at());
  FUZZ_CHECK(resp.expires_at() >= kNowMs + int64_t{params.ttl_s} * 1000);
  FUZZ_CHECK(resp.attempts() == 1);
  FUZZ_CHECK(resp.retry_after_ms() == 0);
  CheckRecordRendering(result.decision.record);

  // The same Begin by another owner at the same instant: IN_USE, rendered
  // with the holder's fence and lease.
  BeginParams other = params;
  other.owner = params.owner + "x";
  result.decision = DecideBegin(result.decision.record, other, kNowMs,
                                [] { return uint64_t{8}; });
  v1::BeginResponse busy;
  FillBeginResponse(result, &busy);
  FUZZ_CHECK(busy.status() == v1::BeginResponse::IN_USE);
  FUZZ_CHECK(busy.fence() == 7);
  FUZZ_CHECK(busy.lease_expires_at() == resp.lease_expires_at());
  FUZZ_CHECK(busy.retry_after_ms() >= 1 &&
             busy.retry_after_ms() <= kMaxRetryAfterMs);
}

void CheckValidComplete(const v1::CompleteRequest& r, const Limits& l) {
  const CompleteParams params = CompleteParamsFrom(r);
  FUZZ_CHECK(params.outcome == Outcome::kSuccess ||
             params.outcome == Outcome::kError);
  FUZZ_CHECK(ToProto(params.outcome) == r.outcome());
  FUZZ_CHECK(params.ttl_s == 0 ||
             (params.ttl_s >= l.min_ttl_s && params.ttl_s <= l.max_ttl_s));

  const LogComplete op{EncodeStorageKey(r.namespace_(), r.key()), params};
  const LogComplete logged = ThroughLog(op);
  FUZZ_CHECK(logged.params.fence == params.fence &&
             logged.params.outcome == params.outcome &&
             logged.params.result == params.result &&
             logged.params.ttl_s == params.ttl_s);

  const Record stored = InFlight(r.fence(), l);
  const FencedDecision d = DecideComplete(stored, logged.params, kNowMs + 5);
  v1::CompleteResponse resp;
  FillCompleteResponse(d, &resp);
  CheckReparse(resp);
  FUZZ_CHECK(resp.status() == v1::CompleteResponse::OK);
  FUZZ_CHECK(resp.fence() == r.fence());
  const uint32_t ttl_s = params.ttl_s != 0 ? params.ttl_s : l.default_ttl_s;
  FUZZ_CHECK(resp.expires_at() == kNowMs + 5 + int64_t{ttl_s} * 1000);
  CheckRecordRendering(d.record);
  v1::Record rendered;
  FillRecord(d.record, &rendered);
  FUZZ_CHECK(rendered.outcome() == r.outcome());
  FUZZ_CHECK(rendered.result() == r.result());

  // The same Complete again is answered OK without a write; a stale fence
  // gets STALE_FENCE with the current fence.
  const FencedDecision again = DecideComplete(d.record, params, kNowMs + 6);
  v1::CompleteResponse again_resp;
  FillCompleteResponse(again, &again_resp);
  FUZZ_CHECK(again.write == WriteKind::kNone);
  FUZZ_CHECK(again_resp.status() == v1::CompleteResponse::OK);
  CompleteParams stale = params;
  stale.fence = params.fence + 1;
  v1::CompleteResponse stale_resp;
  FillCompleteResponse(DecideComplete(d.record, stale, kNowMs + 6),
                       &stale_resp);
  FUZZ_CHECK(stale_resp.status() == v1::CompleteResponse::STALE_FENCE);
  FUZZ_CHECK(stale_resp.fence() == r.fence());
}

void CheckValidRelease(const v1::ReleaseRequest& r, const Limits& l) {
  const LogRelease op{EncodeStorageKey(r.namespace_(), r.key()), r.fence()};
  FUZZ_CHECK(ThroughLog(op).fence == r.fence());
  v1::ReleaseResponse resp;
  FillReleaseResponse(DecideRelease(InFlight(r.fence(), l), r.fence(), kNowMs),
                      &resp);
  FUZZ_CHECK(resp.status() == v1::ReleaseResponse::OK);
  FUZZ_CHECK(resp.fence() == r.fence());
  v1::ReleaseResponse gone;
  FillReleaseResponse(DecideRelease(std::nullopt, r.fence(), kNowMs), &gone);
  FUZZ_CHECK(gone.status() == v1::ReleaseResponse::NOT_FOUND);
  FUZZ_CHECK(gone.fence() == 0);
}

void CheckValidRenew(const v1::RenewRequest& r, const Limits& l) {
  const int64_t lease_ms = ResolveLease(r.lease_ms(), l);
  FUZZ_CHECK(lease_ms >= l.min_lease_ms && lease_ms <= l.max_lease_ms);
  const LogRenew op{EncodeStorageKey(r.namespace_(), r.key()), r.fence(),
                    lease_ms};
  const LogRenew logged = ThroughLog(op);
  FUZZ_CHECK(logged.fence == r.fence() && logged.lease_ms == lease_ms);
  const FencedDecision d = DecideRenew(InFlight(r.fence(), l), logged.fence,
                                       logged.lease_ms, kNowMs + 10);
  v1::RenewResponse resp;
  FillRenewResponse(d, &resp);
  CheckReparse(resp);
  FUZZ_CHECK(resp.status() == v1::RenewResponse::OK);
  FUZZ_CHECK(resp.fence() == r.fence());
  FUZZ_CHECK(resp.lease_expires_at() == kNowMs + 10 + lease_ms);
  FUZZ_CHECK(resp.expires_at() >= resp.lease_expires_at());
}

void CheckValidTarget(const std::string& ns, const std::string& key) {
  const std::string skey = EncodeStorageKey(ns, key);
  FUZZ_CHECK(IsRecordKey(skey));
  FUZZ_CHECK(SlotOfStorageKey(skey) == SlotOf(ns, key));
}

template <typename Message>
bool Parse(absl::string_view bytes, Message* m) {
  return m->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void Run(int method, const Limits& l, absl::string_view bytes) {
  switch (method) {
    case kBegin: {
      v1::BeginRequest r;
      if (!Parse(bytes, &r)) return;
      const absl::Status s = ValidateBegin(r, l);
      CheckVerdict(s, BadBegin(r, l), method);
      if (!s.ok()) return;
      CheckReparse(r);
      CheckValidTarget(r.namespace_(), r.key());
      CheckValidBegin(r, l);
      return;
    }
    case kComplete: {
      v1::CompleteRequest r;
      if (!Parse(bytes, &r)) return;
      const absl::Status s = ValidateComplete(r, l);
      CheckVerdict(s, BadComplete(r, l), method);
      if (!s.ok()) return;
      CheckReparse(r);
      CheckValidTarget(r.namespace_(), r.key());
      CheckValidComplete(r, l);
      return;
    }
    case kRelease: {
      v1::ReleaseRequest r;
      if (!Parse(bytes, &r)) return;
      const absl::Status s = ValidateRelease(r, l);
      CheckVerdict(s, BadRelease(r, l), method);
      if (!s.ok()) return;
      CheckValidTarget(r.namespace_(), r.key());
      CheckValidRelease(r, l);
      return;
    }
    case kRenew: {
      v1::RenewRequest r;
      if (!Parse(bytes, &r)) return;
      const absl::Status s = ValidateRenew(r, l);
      CheckVerdict(s, BadRenew(r, l), method);
      if (!s.ok()) return;
      CheckValidTarget(r.namespace_(), r.key());
      CheckValidRenew(r, l);
      return;
    }
    case kGet:
    case kForget: {
      // Same fields, same rules; parse as each message type.
      v1::GetRequest g;
      if (Parse(bytes, &g)) {
        const absl::Status s = ValidateGet(g, l);
        CheckVerdict(s, BadTarget(g.namespace_(), g.key(), l), kGet);
        if (s.ok()) CheckValidTarget(g.namespace_(), g.key());
      }
      v1::ForgetRequest f;
      if (Parse(bytes, &f)) {
        CheckVerdict(ValidateForget(f, l),
                     BadTarget(f.namespace_(), f.key(), l), kForget);
      }
      return;
    }
    case kBeginBatch: {
      v1::BeginBatchRequest r;
      if (!Parse(bytes, &r)) return;
      CheckBatchSize(r.items_size(), l, method);
      for (const v1::BeginRequest& item : r.items()) {
        std::optional<std::string> bad = BadBegin(item, l);
        if (!bad.has_value() && item.wait_ms() != 0) bad = "wait_ms";
        const absl::Status s = ValidateBatchBegin(item, l);
        CheckVerdict(s, bad, method);
        if (s.ok()) CheckValidBegin(item, l);
      }
      return;
    }
    case kCheckpoint: {
      v1::CheckpointRequest r;
      if (!Parse(bytes, &r)) return;
      const absl::Status s = ValidateCheckpoint(r, l);
      CheckVerdict(s, BadCheckpoint(r, l), method);
      if (s.ok()) CheckValidTarget(r.namespace_(), r.key());
      return;
    }
    case kCheckpointBatch: {
      v1::CheckpointBatchRequest r;
      if (!Parse(bytes, &r)) return;
      CheckBatchSize(r.items_size(), l, method);
      for (const v1::CheckpointRequest& item : r.items()) {
        const absl::Status s = ValidateCheckpoint(item, l);
        CheckVerdict(s, BadCheckpoint(item, l), method);
      }
      return;
    }
    case kCompleteBatch: {
      v1::CompleteBatchRequest r;
      if (!Parse(bytes, &r)) return;
      CheckBatchSize(r.items_size(), l, method);
      for (const v1::CompleteRequest& item : r.items()) {
        const absl::Status s = ValidateComplete(item, l);
        CheckVerdict(s, BadComplete(item, l), method);
        if (s.ok()) CheckValidComplete(item, l);
      }
      return;
    }
  }
}

void CheckOutcomeConversions() {
  for (Outcome o : {Outcome::kNone, Outcome::kSuccess, Outcome::kError}) {
    FUZZ_CHECK(FromProto(ToProto(o)) == o);
  }
  for (v1::Outcome o : {v1::SUCCESS, v1::ERROR}) {
    FUZZ_CHECK(ToProto(FromProto(o)) == o);
  }
}

void IgnoreProtobufLog(google::protobuf::LogLevel, const char*, int,
                       const std::string&) {}

}  // namespace
}  // namespace dedup

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A proto3 string with invalid UTF-8 fails to parse (fine) and protobuf
  // logs an error for each: millions of lines in a fuzzing run.
  google::protobuf::SetLogHandler(&dedup::IgnoreProtobufLog);
  dedup::CheckOutcomeConversions();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int method = data[0] % dedup::kMethodCount;
  const dedup::Limits limits = dedup::LimitsFor(data[1]);
  dedup::Run(
      method, limits,
      absl::string_view(reinterpret_cast<const char*>(data) + 2, size - 2));
  return 0;
}
