// A Session frame's operations: each checked as its unary call would be
// (namespace permission, validation against its namespace's policy), the
// tenant's limits applied to the frame, then handed to the store together.
#include <algorithm>
#include <utility>
#include <vector>

#include "server/dedup_service.h"
#include "server/item_error.h"
#include "server/proto_convert.h"
#include "server/rpc_call.h"
#include "server/session_reactor.h"

namespace dedup {
namespace {

// As for a unary Begin: a waiting Begin gives up a little before its
// timeout, so that its IN_USE (which the client can act on) arrives first.
constexpr int64_t kDeadlineMarginMs = 20;

int64_t WaitMsOf(const v1::SessionOp& op) {
  const int64_t wait_ms = op.begin().wait_ms();
  if (wait_ms == 0 || op.timeout_ms() == 0) return wait_ms;
  return std::clamp<int64_t>(int64_t{op.timeout_ms()} - kDeadlineMarginMs, 0,
                             wait_ms);
}

}  // namespace

absl::Status DedupService::CheckSessionOp(const Caller& caller,
                                          const v1::SessionOp& op,
                                          EffectivePolicy* policy) const {
  switch (op.op_case()) {
    case v1::SessionOp::kBegin:
      return CheckBatchItem(
          caller, Method::kBegin, op.begin().namespace_(),
          [&op](const Limits& l) { return ValidateBegin(op.begin(), l); },
          policy);
    case v1::SessionOp::kComplete:
      return CheckBatchItem(
          caller, Method::kComplete, op.complete().namespace_(),
          [&op](const Limits& l) { return ValidateComplete(op.complete(), l); },
          policy);
    case v1::SessionOp::kRelease:
      return CheckBatchItem(
          caller, Method::kRelease, op.release().namespace_(),
          [&](const Limits&) { return ValidateRelease(op.release(), limits_); },
          policy);
    case v1::SessionOp::kRenew:
      return CheckBatchItem(
          caller, Method::kRenew, op.renew().namespace_(),
          [&op](const Limits& l) { return ValidateRenew(op.renew(), l); },
          policy);
    case v1::SessionOp::kCheckpoint:
      return CheckBatchItem(
          caller, Method::kCheckpoint, op.checkpoint().namespace_(),
          [&op](const Limits& l) {
            return ValidateCheckpoint(op.checkpoint(), l);
          },
          policy);
    case v1::SessionOp::kGet:
      return CheckBatchItem(
          caller, Method::kGet, op.get().namespace_(),
          [&](const Limits&) { return ValidateGet(op.get(), limits_); },
          policy);
    default:
      return absl::InvalidArgumentError("op: not set");
  }
}

void SessionReactor::Submit(const std::shared_ptr<Frame>& frame) {
  const int n = frame->request.ops_size();
  std::vector<EffectivePolicy> policies(n);
  std::vector<absl::Status> refusals(n);
  int begins = 0;
  int valid = 0;
  for (int i = 0; i < n; ++i) {
    const v1::SessionOp& op = frame->request.ops(i);
    refusals[i] = service_->CheckSessionOp(caller_, op, &policies[i]);
    if (!refusals[i].ok()) continue;
    ++valid;
    if (op.has_begin()) ++begins;
  }
  // The frame's refusals common to its operations: a stopping server, the
  // tenant's stored_bytes (Begins only) and its rate (each one counts).
  absl::Status common = service_->lame_duck_.Check();
  absl::Status stored;
  if (common.ok() && begins > 0) {
    stored = service_->auth_->AdmitStoredBytes(caller_, begins);
    if (!stored.ok()) valid -= begins;
  }
  if (common.ok() && valid > 0) {
    absl::StatusOr<std::shared_ptr<void>> admitted =
        service_->auth_->Admit(caller_, valid);
    if (admitted.ok()) {
      frame->admitted = *std::move(admitted);
    } else {
      common = admitted.status();
    }
  }
  std::vector<bool> to_store(n, false);
  for (int i = 0; i < n; ++i) {
    if (refusals[i].ok()) refusals[i] = common;
    if (refusals[i].ok() && frame->request.ops(i).has_begin()) {
      refusals[i] = stored;
    }
    to_store[i] = refusals[i].ok();
    if (!to_store[i]) Refuse(frame, i, refusals[i]);
  }
  frame->budget.emplace(service_->limits_.max_batch_response_bytes);
  SubmitToStore(frame, to_store, policies);
}

namespace {

// The answer of a fenced operation (Complete, Release, Renew, Checkpoint).
template <typename Fill, typename Out>
v1::SessionAnswer FencedAnswer(const absl::StatusOr<FencedDecision>& d,
                               Fill fill, Out out) {
  v1::SessionAnswer answer;
  if (d.ok()) {
    fill(*d, out(&answer));
  } else {
    FillItemError(d.status(), answer.mutable_error());
  }
  return answer;
}

}  // namespace

StoreCallback<BeginResult> SessionReactor::BeginDone(
    const std::shared_ptr<Frame>& frame, int i) {
  return [this, frame, i](absl::StatusOr<BeginResult> r) {
    v1::SessionAnswer answer;
    if (r.ok()) {
      service_->Observe(frame->request.ops(i).begin(), *r);
      FillBeginResponse(*r, answer.mutable_begin());
    } else {
      FillItemError(r.status(), answer.mutable_error());
      if (r.status().GetPayload(kResultBudgetPayload)) {
        answer.mutable_error()->set_reason("RESULT_BUDGET");
      }
    }
    Answer(frame, i, std::move(answer));
  };
}

StoreCallback<FencedDecision> SessionReactor::FencedDone(
    const std::shared_ptr<Frame>& frame, int i) {
  return [this, frame, i](absl::StatusOr<FencedDecision> d) {
    const v1::SessionOp& op = frame->request.ops(i);
    const DedupService* const s = service_;
    v1::SessionAnswer answer;
    switch (op.op_case()) {
      case v1::SessionOp::kComplete:
        if (d.ok()) s->Observe(Method::kComplete, op.complete(), *d);
        answer = FencedAnswer(d, FillCompleteResponse,
                              [](auto* a) { return a->mutable_complete(); });
        break;
      case v1::SessionOp::kRelease:
        if (d.ok()) s->Observe(Method::kRelease, op.release(), *d);
        answer = FencedAnswer(d, FillReleaseResponse,
                              [](auto* a) { return a->mutable_release(); });
        break;
      case v1::SessionOp::kRenew:
        if (d.ok()) s->Observe(Method::kRenew, op.renew(), *d);
        answer = FencedAnswer(d, FillRenewResponse,
                              [](auto* a) { return a->mutable_renew(); });
        break;
      default:
        if (d.ok()) s->Observe(Method::kCheckpoint, op.checkpoint(), *d);
        answer = FencedAnswer(d, FillCheckpointResponse,
                              [](auto* a) { return a->mutable_checkpoint(); });
    }
    Answer(frame, i, std::move(answer));
  };
}

StoreCallback<std::optional<Record>> SessionReactor::GetDone(
    const std::shared_ptr<Frame>& frame, int i) {
  return [this, frame, i](absl::StatusOr<std::optional<Record>> r) {
    v1::SessionAnswer answer;
    if (!r.ok()) {
      FillItemError(r.status(), answer.mutable_error());
    } else {
      answer.mutable_get()->set_found(r->has_value());
      if (r->has_value()) {
        FillRecord(**r, answer.mutable_get()->mutable_record());
      }
    }
    Answer(frame, i, std::move(answer));
  };
}

void SessionReactor::SubmitToStore(
    const std::shared_ptr<Frame>& frame, const std::vector<bool>& to_store,
    const std::vector<EffectivePolicy>& policies) {
  const DedupService* const s = service_;
  std::vector<Store::BeginCall> begins;
  std::vector<Store::CompleteCall> completes;
  for (int i = 0; i < frame->request.ops_size(); ++i) {
    const v1::SessionOp& op = frame->request.ops(i);
    if (!to_store[i]) continue;
    if (op.has_begin() && op.begin().wait_ms() == 0) {
      begins.push_back(
          Store::BeginCall{op.begin().namespace_(), op.begin().key(),
                           s->BeginParamsOf(op.begin(), policies[i]),
                           BeginDone(frame, i), &*frame->budget});
    } else if (op.has_complete()) {
      completes.push_back(
          Store::CompleteCall{op.complete().namespace_(), op.complete().key(),
                              s->CompleteParamsOf(op.complete(), policies[i]),
                              FencedDone(frame, i)});
    }
  }
  // Back to back: the shards take them into the same group commit (a
  // group's leader, into the same log entries) as far as they fit.
  if (!begins.empty()) s->store_->BeginMany(std::move(begins));
  if (!completes.empty()) s->store_->CompleteMany(std::move(completes));
  for (int i = 0; i < frame->request.ops_size(); ++i) {
    if (to_store[i]) SubmitOne(frame, i, policies[i]);
  }
}

void SessionReactor::SubmitOne(const std::shared_ptr<Frame>& frame, int i,
                               const EffectivePolicy& policy) {
  const DedupService* const s = service_;
  Store* const store = s->store_;
  const v1::SessionOp& op = frame->request.ops(i);
  switch (op.op_case()) {
    case v1::SessionOp::kBegin:
      if (op.begin().wait_ms() == 0) break;  // in BeginMany
      store->Begin(op.begin().namespace_(), op.begin().key(),
                   s->BeginParamsOf(op.begin(), policy), WaitMsOf(op),
                   BeginDone(frame, i));
      break;
    case v1::SessionOp::kRelease:
      store->Release(op.release().namespace_(), op.release().key(),
                     op.release().fence(), FencedDone(frame, i));
      break;
    case v1::SessionOp::kRenew:
      store->Renew(op.renew().namespace_(), op.renew().key(),
                   op.renew().fence(),
                   ResolveLease(op.renew().lease_ms(), policy.limits),
                   FencedDone(frame, i));
      break;
    case v1::SessionOp::kCheckpoint:
      store->Checkpoint(op.checkpoint().namespace_(), op.checkpoint().key(),
                        DedupService::CheckpointParamsOf(op.checkpoint()),
                        FencedDone(frame, i));
      break;
    case v1::SessionOp::kGet:
      store->Get(op.get().namespace_(), op.get().key(), GetDone(frame, i));
      break;
    default:
      break;  // Complete: in CompleteMany
  }
}

}  // namespace dedup
