#include "server/dedup_service.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/proto_convert.h"
#include "server/rpc_call.h"
#include "server/session_reactor.h"

namespace dedup {
namespace {

// Leaves the answer enough time to reach a client whose deadline is shorter
// than its wait_ms: an IN_USE it can act on beats DEADLINE_EXCEEDED.
constexpr int64_t kDeadlineMarginMs = 20;

int64_t EffectiveWaitMs(const grpc::CallbackServerContext& context,
                        uint32_t wait_ms) {
  if (wait_ms == 0) return 0;
  const auto remaining =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          context.deadline() - std::chrono::system_clock::now())
          .count();
  return std::clamp<int64_t>(remaining - kDeadlineMarginMs, 0, wait_ms);
}

}  // namespace

EffectivePolicy DedupService::PolicyFor(absl::string_view ns) const {
  if (policies_ == nullptr) {
    EffectivePolicy flags;
    flags.limits = limits_;
    return flags;
  }
  return policies_->Current()->For(ns);
}

// Everything a decision depends on is resolved here, from this node's
// policy, and travels in the operation.
BeginParams DedupService::BeginParamsOf(const v1::BeginRequest& request,
                                        const EffectivePolicy& policy) const {
  BeginParams params;
  params.args_hash = request.args_hash();
  params.owner = request.owner();
  params.lease_ms = ResolveLease(request.lease_ms(), policy.limits);
  params.ttl_s = ResolveTtl(request.ttl_s(), policy.limits);
  params.accept_rerun = request.accept_rerun();
  params.retry_errors = policy.retry_errors;
  return params;
}

CompleteParams DedupService::CompleteParamsOf(
    const v1::CompleteRequest& request, const EffectivePolicy& policy) const {
  CompleteParams params;
  params.fence = request.fence();
  params.outcome = FromProto(request.outcome());
  params.result = request.result();
  params.ttl_s = request.ttl_s();
  // Decided here and carried in the operation, so every replica keeps the
  // same tombstone whatever its own flags say.
  params.retention_ms = int64_t{policy.limits.tombstone_retention_s} * 1000;
  return params;
}

CheckpointParams DedupService::CheckpointParamsOf(
    const v1::CheckpointRequest& request) {
  CheckpointParams params;
  params.fence = request.fence();
  params.step = request.step();
  params.data = request.data();
  params.lease_ms = request.lease_ms();
  return params;
}

void DedupService::Observe(const v1::BeginRequest& request,
                           const BeginResult& r) const {
  metrics_->RecordBegin(request.namespace_(), r);
  if (events_ != nullptr) {
    events_->OnBegin(request.namespace_(), request.key(), r,
                     RealClock()->NowMillis());
  }
}

template <typename Request>
void DedupService::Observe(Method method, const Request& request,
                           const FencedDecision& d) const {
  metrics_->RecordFenced(method, d.status);
  if (events_ != nullptr) {
    events_->OnFenced(method, request.namespace_(), request.key(),
                      request.fence(), d, RealClock()->NowMillis());
  }
}
template void DedupService::Observe(Method, const v1::CompleteRequest&,
                                    const FencedDecision&) const;
template void DedupService::Observe(Method, const v1::CheckpointRequest&,
                                    const FencedDecision&) const;
template void DedupService::Observe(Method, const v1::ReleaseRequest&,
                                    const FencedDecision&) const;
template void DedupService::Observe(Method, const v1::RenewRequest&,
                                    const FencedDecision&) const;

void DedupService::EnterLameDuck() {
  lame_duck_.Enter();
  // Streams end once what they have in flight is answered. Under the lock:
  // a stream leaves the set (in its OnDone) before it is deleted.
  absl::MutexLock lock(&sessions_mu_);
  for (SessionReactor* session : sessions_) session->Stop();
}

void DedupService::AddSession(SessionReactor* session) const {
  {
    absl::MutexLock lock(&sessions_mu_);
    sessions_.insert(session);
  }
  // Entered meanwhile: EnterLameDuck may have missed it.
  if (!lame_duck_.Check().ok()) session->Stop();
}

void DedupService::RemoveSession(SessionReactor* session) const {
  absl::MutexLock lock(&sessions_mu_);
  sessions_.erase(session);
}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>*
DedupService::Session(grpc::CallbackServerContext* context) {
  return new SessionReactor(this, context);
}

absl::Status DedupService::Serving(Access access) const {
  absl::Status serving = access == Access::kRead ? store_->CheckServingReads()
                                                 : store_->CheckServing();
  if (serving.ok()) serving = lame_duck_.Check();
  return serving;
}

bool DedupService::ForwardsCall(
    const grpc::CallbackServerContext& context) const {
  // A stopping node takes no new work, forwarded or not.
  return forwarder_ != nullptr && lame_duck_.Check().ok() &&
         forwarder_->MayForward(context);
}

absl::Status DedupService::Authorize(const grpc::CallbackServerContext& context,
                                     TenantRole role, absl::string_view what,
                                     absl::string_view ns, RpcCall* call,
                                     bool may_store_more) const {
  absl::StatusOr<Caller> caller = auth_->Authorize(context, role, what);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = auth_->AllowNamespace(*caller, ns); !s.ok()) return s;
  // Before the other limits: a refused call spends none of the tenant's
  // requests per second.
  if (may_store_more) {
    if (absl::Status s = auth_->AdmitStoredBytes(*caller, 1); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<void>> admitted = auth_->Admit(*caller, 1);
  if (!admitted.ok()) return admitted.status();
  call->Hold(*std::move(admitted));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DedupService::Begin(
    grpc::CallbackServerContext* context, const v1::BeginRequest* request,
    v1::BeginResponse* response) {
  RpcCall call(context, Method::kBegin, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Begin",
                             request->namespace_(), &call,
                             /*may_store_more=*/true))) {
    return call.reactor();
  }
  const EffectivePolicy policy = PolicyFor(request->namespace_());
  if (call.Rejected(
          NamePolicy(ValidateBegin(*request, policy.limits), policy))) {
    return call.reactor();
  }
  if (NotServing(call, request, response)) return call.reactor();
  // The request stays valid until the call finishes, so the callback reads
  // namespace and key from it instead of copying them.
  store_->Begin(request->namespace_(), request->key(),
                BeginParamsOf(*request, policy),
                EffectiveWaitMs(*context, request->wait_ms()),
                [this, call, request, response](absl::StatusOr<BeginResult> r) {
                  if (!r.ok()) {
                    return FailOrForward(call, r.status(), request, response);
                  }
                  Observe(*request, *r);
                  FillBeginResponse(*r, response);
                  call.Finish(grpc::Status::OK, r->waited);
                });
  return call.reactor();
}

// Callback for the fenced calls (Complete, Release, Renew): counts the answer,
// logs stale fences, fills the response and finishes.
template <typename Request, typename Response, typename Fill>
StoreCallback<FencedDecision> DedupService::Fenced(const RpcCall& call,
                                                   const Request* request,
                                                   Response* response,
                                                   Fill fill) const {
  return
      [this, call, request, response, fill](absl::StatusOr<FencedDecision> d) {
        if (!d.ok()) return FailOrForward(call, d.status(), request, response);
        Observe(call.method(), *request, *d);
        fill(*d, response);
        call.Finish(grpc::Status::OK);
      };
}

grpc::ServerUnaryReactor* DedupService::Complete(
    grpc::CallbackServerContext* context, const v1::CompleteRequest* request,
    v1::CompleteResponse* response) {
  RpcCall call(context, Method::kComplete, metrics_);
  // Never refused for stored_bytes: the side effect already happened, and a
  // refused Complete would leave the claim to a takeover that runs it again.
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Complete",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  const EffectivePolicy policy = PolicyFor(request->namespace_());
  if (call.Rejected(
          NamePolicy(ValidateComplete(*request, policy.limits), policy))) {
    return call.reactor();
  }
  if (NotServing(call, request, response)) return call.reactor();
  store_->Complete(request->namespace_(), request->key(),
                   CompleteParamsOf(*request, policy),
                   Fenced(call, request, response, FillCompleteResponse));
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::Release(
    grpc::CallbackServerContext* context, const v1::ReleaseRequest* request,
    v1::ReleaseResponse* response) {
  RpcCall call(context, Method::kRelease, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Release",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  if (call.Rejected(ValidateRelease(*request, limits_))) return call.reactor();
  if (NotServing(call, request, response)) return call.reactor();
  store_->Release(request->namespace_(), request->key(), request->fence(),
                  Fenced(call, request, response, FillReleaseResponse));
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::Renew(
    grpc::CallbackServerContext* context, const v1::RenewRequest* request,
    v1::RenewResponse* response) {
  RpcCall call(context, Method::kRenew, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Renew",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  const EffectivePolicy policy = PolicyFor(request->namespace_());
  if (call.Rejected(
          NamePolicy(ValidateRenew(*request, policy.limits), policy))) {
    return call.reactor();
  }
  if (NotServing(call, request, response)) return call.reactor();
  store_->Renew(request->namespace_(), request->key(), request->fence(),
                ResolveLease(request->lease_ms(), policy.limits),
                Fenced(call, request, response, FillRenewResponse));
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::Checkpoint(
    grpc::CallbackServerContext* context, const v1::CheckpointRequest* request,
    v1::CheckpointResponse* response) {
  RpcCall call(context, Method::kCheckpoint, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Checkpoint",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  const EffectivePolicy policy = PolicyFor(request->namespace_());
  if (call.Rejected(
          NamePolicy(ValidateCheckpoint(*request, policy.limits), policy))) {
    return call.reactor();
  }
  if (NotServing(call, request, response)) return call.reactor();
  store_->Checkpoint(request->namespace_(), request->key(),
                     CheckpointParamsOf(*request),
                     Fenced(call, request, response, FillCheckpointResponse));
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::GetResponse* response) {
  RpcCall call(context, Method::kGet, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kClient, "Get",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  if (call.Rejected(ValidateGet(*request, limits_))) return call.reactor();
  if (NotServing(call, request, response, Access::kRead)) {
    return call.reactor();
  }
  store_->Get(
      request->namespace_(), request->key(),
      [this, call, request, response](absl::StatusOr<std::optional<Record>> r) {
        if (!r.ok()) return FailOrForward(call, r.status(), request, response);
        response->set_found(r->has_value());
        if (r->has_value()) {
          FillRecord(**r, response->mutable_record());
        }
        call.Finish(grpc::Status::OK);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DedupService::Forget(
    grpc::CallbackServerContext* context, const v1::ForgetRequest* request,
    v1::ForgetResponse* response) {
  RpcCall call(context, Method::kForget, metrics_);
  if (call.Refused(Authorize(*context, TenantRole::kOperator, "Forget",
                             request->namespace_(), &call))) {
    return call.reactor();
  }
  if (call.Rejected(ValidateForget(*request, limits_))) return call.reactor();
  if (NotServing(call, request, response)) return call.reactor();
  store_->Forget(request->namespace_(), request->key(),
                 [this, call, request, response](absl::StatusOr<bool> r) {
                   if (!r.ok()) {
                     return FailOrForward(call, r.status(), request, response);
                   }
                   response->set_existed(*r);
                   call.Finish(grpc::Status::OK);
                 });
  return call.reactor();
}

}  // namespace dedup
