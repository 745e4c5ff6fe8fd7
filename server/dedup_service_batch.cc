// BeginBatch, CompleteBatch and CheckpointBatch: independent items sharing
// one RPC. Each valid
// item goes to its key's storage shard like a unary call (so shards batch
// them into their group commits); the RPC is answered when the last item is.
#include <atomic>
#include <functional>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/dedup_service.h"
#include "server/item_error.h"
#include "server/proto_convert.h"

namespace dedup {
namespace {

// ItemError.reason of a DUPLICATE left out by the batch's result budget.
constexpr char kItemErrorResultBudget[] = "RESULT_BUDGET";

// Owned by the batch's item callbacks; the last one to finish answers and
// deletes it. Starts one above the item count so that the handler itself
// holds a reference until every item is submitted.
class BatchCompletion {
 public:
  // Forwards the deferred items and finishes the call once they are back.
  using ForwardItems =
      std::function<void(const RpcCall&, std::vector<DeferredItem>)>;

  // `forward`: null when items refused with a leader hint are answered so.
  BatchCompletion(const RpcCall& call, int items, int64_t result_budget,
                  Forwarder* forwarder = nullptr,
                  ForwardItems forward = nullptr)
      : call_(call),
        pending_(items + 1),
        result_budget_(result_budget),
        forwarder_(forward == nullptr ? nullptr : forwarder),
        forward_(std::move(forward)) {}

  // Shared by the items' store calls (outlives them: this object is
  // deleted after the last item's callback).
  ResultBudget* result_budget() { return &result_budget_; }

  // True when item `index`, refused with `error`, goes on to the leader
  // `error` names instead of being answered with it. Call before ItemDone.
  bool Defer(int index, const absl::Status& error) {
    if (forwarder_ == nullptr) return false;
    std::string target = forwarder_->TargetOf(error);
    if (target.empty()) return false;
    absl::MutexLock lock(&mu_);
    deferred_.push_back(DeferredItem{index, std::move(target)});
    return true;
  }

  void ItemDone() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Every item is in: no callback touches deferred_ any more.
      std::vector<DeferredItem> deferred;
      {
        absl::MutexLock lock(&mu_);
        deferred.swap(deferred_);
      }
      if (deferred.empty()) {
        call_.Finish(grpc::Status::OK);
      } else {
        forward_(call_, std::move(deferred));
      }
      delete this;
    }
  }

 private:
  const RpcCall call_;
  std::atomic<int> pending_;
  ResultBudget result_budget_;
  Forwarder* const forwarder_;
  const ForwardItems forward_;
  absl::Mutex mu_;
  std::vector<DeferredItem> deferred_ ABSL_GUARDED_BY(mu_);
};

void SetItemError(v1::ItemError* error, int index, const absl::Status& status,
                  bool prefix_field) {
  FillItemError(status,
                prefix_field
                    ? absl::StrCat("items[", index, "].", status.message())
                    : std::string(status.message()),
                error);
}

// A batch's items as judged before routing: each one's refusal (OK: it goes
// to the store) and its namespace's policy.
struct CheckedItems {
  std::vector<absl::Status> refusals;
  std::vector<EffectivePolicy> policies;
  int to_store = 0;
};

CheckedItems CheckItems(
    int n, absl::FunctionRef<absl::Status(int, EffectivePolicy*)> check) {
  CheckedItems checked;
  checked.refusals.resize(n);
  checked.policies.resize(n);
  for (int i = 0; i < n; ++i) {
    checked.refusals[i] = check(i, &checked.policies[i]);
    if (checked.refusals[i].ok()) ++checked.to_store;
  }
  return checked;
}

// How a batch's items refused with a leader hint go on to it: null when
// they do not (no `forwarder`).
template <typename BatchRequest, typename BatchResponse>
BatchCompletion::ForwardItems ItemForwarding(Forwarder* forwarder,
                                             const BatchRequest* request,
                                             BatchResponse* response) {
  if (forwarder == nullptr) return nullptr;
  return [forwarder, request, response](const RpcCall& call,
                                        std::vector<DeferredItem> items) {
    forwarder->ForwardItems(call, std::move(items), request, response);
  };
}

// Answers item `i` with `refusal` (its field prefixed "items[i].").
void RefuseItem(v1::ItemError* error, int i, const absl::Status& refusal,
                BatchCompletion* completion) {
  SetItemError(error, i, refusal, /*prefix_field=*/true);
  completion->ItemDone();
}

}  // namespace

std::optional<Caller> DedupService::AdmitBatch(
    const grpc::CallbackServerContext& context, absl::string_view what,
    int items, bool may_store_more, RpcCall* call) const {
  absl::StatusOr<Caller> caller =
      auth_->Authorize(context, TenantRole::kClient, what);
  if (call->Refused(caller.status())) return std::nullopt;
  if (call->Rejected(ValidateBatchSize(items, limits_))) return std::nullopt;
  // A tenant at its stored_bytes limit: every item would be refused alike
  // (the limit is the tenant's, not a namespace's), so the whole call is,
  // with the RetryInfo clients already wait on.
  if (may_store_more &&
      call->Refused(auth_->AdmitStoredBytes(*caller, items))) {
    return std::nullopt;
  }
  // Each item counts against the tenant's requests per second.
  absl::StatusOr<std::shared_ptr<void>> admitted = auth_->Admit(*caller, items);
  if (call->Refused(admitted.status())) return std::nullopt;
  call->Hold(*std::move(admitted));
  return *std::move(caller);
}

absl::Status DedupService::CheckBatchItem(
    const Caller& caller, Method method, absl::string_view ns,
    absl::FunctionRef<absl::Status(const Limits&)> validate,
    EffectivePolicy* policy) const {
  // Judged item by item: one foreign namespace refuses only its item.
  if (absl::Status a = auth_->AllowNamespace(caller, ns); !a.ok()) return a;
  *policy = PolicyFor(ns);
  absl::Status v = NamePolicy(validate(policy->limits), *policy);
  if (!v.ok()) metrics_->RecordInvalid(method, FieldOf(v));
  return v;
}

grpc::ServerUnaryReactor* DedupService::BeginBatch(
    grpc::CallbackServerContext* context, const v1::BeginBatchRequest* request,
    v1::BeginBatchResponse* response) {
  RpcCall call(context, Method::kBeginBatch, metrics_);
  const int n = request->items_size();
  const std::optional<Caller> caller =
      AdmitBatch(*context, "BeginBatch", n, /*may_store_more=*/true, &call);
  if (!caller.has_value()) return call.reactor();
  // Authorized and validated before routing: a follower refuses a foreign
  // namespace as the leader would, instead of naming the leader.
  const CheckedItems checked =
      CheckItems(n, [&](int i, EffectivePolicy* policy) {
        const v1::BeginRequest& item = request->items(i);
        return CheckBatchItem(
            *caller, Method::kBeginBatch, item.namespace_(),
            [&item](const Limits& l) { return ValidateBatchBegin(item, l); },
            policy);
      });
  if (BatchNotServing(call, n, checked.to_store, request, response)) {
    return call.reactor();
  }
  // Every answer slot exists before any callback runs: callbacks on
  // different shard threads then only ever touch their own item.
  for (int i = 0; i < n; ++i) response->add_items();
  Forwarder* const forwarder = ItemForwarder(*context);
  auto* completion =
      new BatchCompletion(call, n, limits_.max_batch_response_bytes, forwarder,
                          ItemForwarding(forwarder, request, response));
  std::vector<Store::BeginCall> calls;
  calls.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::BeginRequest* item = &request->items(i);
    v1::BeginBatchResponse::Item* out = response->mutable_items(i);
    if (!checked.refusals[i].ok()) {
      RefuseItem(out->mutable_error(), i, checked.refusals[i], completion);
      continue;
    }
    auto done = [this, completion, item, out,
                 i](absl::StatusOr<BeginResult> r) {
      if (!r.ok() && r.status().GetPayload(kResultBudgetPayload)) {
        metrics_->RecordBatchResultsCapped();
      }
      if (r.ok()) {
        Observe(*item, *r);
        FillBeginResponse(*r, out->mutable_response());
      } else if (!completion->Defer(i, r.status())) {
        SetItemError(out->mutable_error(), i, r.status(),
                     /*prefix_field=*/false);
        if (r.status().GetPayload(kResultBudgetPayload)) {
          out->mutable_error()->set_reason(kItemErrorResultBudget);
        }
      }
      completion->ItemDone();
    };
    // A DUPLICATE past the budget is answered UNAVAILABLE by the store
    // (clients ask again): without it, a small request naming one large
    // result many times makes gigabytes of answers.
    calls.push_back(Store::BeginCall{item->namespace_(), item->key(),
                                     BeginParamsOf(*item, checked.policies[i]),
                                     std::move(done),
                                     completion->result_budget()});
  }
  store_->BeginMany(std::move(calls));
  completion->ItemDone();
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::CompleteBatch(
    grpc::CallbackServerContext* context,
    const v1::CompleteBatchRequest* request,
    v1::CompleteBatchResponse* response) {
  RpcCall call(context, Method::kCompleteBatch, metrics_);
  const int n = request->items_size();
  // No stored_bytes check: a Complete records a side effect that already
  // happened, and refusing it would leave the claim to a takeover that runs
  // the side effect again. Usage may overshoot by the results in flight.
  const std::optional<Caller> caller =
      AdmitBatch(*context, "CompleteBatch", n, /*may_store_more=*/false, &call);
  if (!caller.has_value()) return call.reactor();
  const CheckedItems checked = CheckItems(n, [&](int i,
                                                 EffectivePolicy* policy) {
    const v1::CompleteRequest& item = request->items(i);
    return CheckBatchItem(
        *caller, Method::kCompleteBatch, item.namespace_(),
        [&item](const Limits& l) { return ValidateComplete(item, l); }, policy);
  });
  if (BatchNotServing(call, n, checked.to_store, request, response)) {
    return call.reactor();
  }
  for (int i = 0; i < n; ++i) response->add_items();
  // Complete answers carry no stored result: no budget to keep.
  Forwarder* const forwarder = ItemForwarder(*context);
  auto* completion =
      new BatchCompletion(call, n, /*result_budget=*/0, forwarder,
                          ItemForwarding(forwarder, request, response));
  std::vector<Store::CompleteCall> calls;
  calls.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::CompleteRequest* item = &request->items(i);
    v1::CompleteBatchResponse::Item* out = response->mutable_items(i);
    if (!checked.refusals[i].ok()) {
      RefuseItem(out->mutable_error(), i, checked.refusals[i], completion);
      continue;
    }
    auto done = [this, completion, item, out,
                 i](absl::StatusOr<FencedDecision> d) {
      if (d.ok()) {
        Observe(Method::kComplete, *item, *d);
        FillCompleteResponse(*d, out->mutable_response());
      } else if (!completion->Defer(i, d.status())) {
        SetItemError(out->mutable_error(), i, d.status(),
                     /*prefix_field=*/false);
      }
      completion->ItemDone();
    };
    calls.push_back(Store::CompleteCall{
        item->namespace_(), item->key(),
        CompleteParamsOf(*item, checked.policies[i]), std::move(done)});
  }
  store_->CompleteMany(std::move(calls));
  completion->ItemDone();
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::CheckpointBatch(
    grpc::CallbackServerContext* context,
    const v1::CheckpointBatchRequest* request,
    v1::CheckpointBatchResponse* response) {
  RpcCall call(context, Method::kCheckpointBatch, metrics_);
  const int n = request->items_size();
  // No stored_bytes check, as for CompleteBatch: a checkpoint records
  // progress already made, and refusing it would make a takeover redo it.
  const std::optional<Caller> caller = AdmitBatch(
      *context, "CheckpointBatch", n, /*may_store_more=*/false, &call);
  if (!caller.has_value()) return call.reactor();
  const CheckedItems checked =
      CheckItems(n, [&](int i, EffectivePolicy* policy) {
        const v1::CheckpointRequest& item = request->items(i);
        return CheckBatchItem(
            *caller, Method::kCheckpointBatch, item.namespace_(),
            [&item](const Limits& l) { return ValidateCheckpoint(item, l); },
            policy);
      });
  if (BatchNotServing(call, n, checked.to_store, request, response)) {
    return call.reactor();
  }
  for (int i = 0; i < n; ++i) response->add_items();
  Forwarder* const forwarder = ItemForwarder(*context);
  auto* completion =
      new BatchCompletion(call, n, /*result_budget=*/0, forwarder,
                          ItemForwarding(forwarder, request, response));
  for (int i = 0; i < n; ++i) {
    const v1::CheckpointRequest* item = &request->items(i);
    v1::CheckpointBatchResponse::Item* out = response->mutable_items(i);
    if (!checked.refusals[i].ok()) {
      RefuseItem(out->mutable_error(), i, checked.refusals[i], completion);
      continue;
    }
    // Each item goes to its key's shard as a unary Checkpoint would: the
    // shards put the items into their group commits (or, in a group, the
    // leader into its log entries), so no many-call form is needed.
    store_->Checkpoint(
        item->namespace_(), item->key(), CheckpointParamsOf(*item),
        [this, completion, item, out, i](absl::StatusOr<FencedDecision> d) {
          if (d.ok()) {
            Observe(Method::kCheckpoint, *item, *d);
            FillCheckpointResponse(*d, out->mutable_response());
          } else if (!completion->Defer(i, d.status())) {
            SetItemError(out->mutable_error(), i, d.status(),
                         /*prefix_field=*/false);
          }
          completion->ItemDone();
        });
  }
  completion->ItemDone();
  return call.reactor();
}

}  // namespace dedup
