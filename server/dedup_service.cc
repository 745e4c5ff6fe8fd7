#include "server/dedup_service.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/proto_convert.h"

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

// Finishes `reactor` with `status` when it is not OK; returns whether it did.
bool FinishIfInvalid(grpc::ServerUnaryReactor* reactor,
                     const absl::Status& status) {
  if (status.ok()) return false;
  reactor->Finish(ToGrpcStatus(status));
  return true;
}

// Builds the store callback that fills `response` and finishes the call.
template <typename T, typename Response, typename Fill>
StoreCallback<T> Finisher(grpc::ServerUnaryReactor* reactor, Response* response,
                          Fill fill) {
  return [reactor, response, fill](absl::StatusOr<T> result) {
    if (!result.ok()) {
      reactor->Finish(ToGrpcStatus(result.status()));
      return;
    }
    fill(*result, response);
    reactor->Finish(grpc::Status::OK);
  };
}

}  // namespace

grpc::ServerUnaryReactor* DedupService::Begin(
    grpc::CallbackServerContext* context, const v1::BeginRequest* request,
    v1::BeginResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateBegin(*request, limits_))) {
    return reactor;
  }
  BeginParams params;
  params.args_hash = request->args_hash();
  params.owner = request->owner();
  params.lease_ms = ResolveLease(request->lease_ms(), limits_);
  params.ttl_s = ResolveTtl(request->ttl_s(), limits_);
  store_->Begin(request->namespace_(), request->key(), std::move(params),
                EffectiveWaitMs(*context, request->wait_ms()),
                Finisher<BeginResult>(reactor, response, FillBeginResponse));
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Complete(
    grpc::CallbackServerContext* context, const v1::CompleteRequest* request,
    v1::CompleteResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateComplete(*request, limits_))) {
    return reactor;
  }
  CompleteParams params;
  params.fence = request->fence();
  params.outcome = FromProto(request->outcome());
  params.result = request->result();
  params.ttl_s = request->ttl_s();
  store_->Complete(
      request->namespace_(), request->key(), std::move(params),
      Finisher<FencedDecision>(reactor, response, FillCompleteResponse));
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Release(
    grpc::CallbackServerContext* context, const v1::ReleaseRequest* request,
    v1::ReleaseResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateRelease(*request, limits_))) {
    return reactor;
  }
  store_->Release(
      request->namespace_(), request->key(), request->fence(),
      Finisher<FencedDecision>(reactor, response, FillReleaseResponse));
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Renew(
    grpc::CallbackServerContext* context, const v1::RenewRequest* request,
    v1::RenewResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateRenew(*request, limits_))) {
    return reactor;
  }
  store_->Renew(request->namespace_(), request->key(), request->fence(),
                ResolveLease(request->lease_ms(), limits_),
                Finisher<FencedDecision>(reactor, response, FillRenewResponse));
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::GetResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateGet(*request, limits_))) {
    return reactor;
  }
  store_->Get(
      request->namespace_(), request->key(),
      Finisher<std::optional<Record>>(
          reactor, response,
          [](const std::optional<Record>& record, v1::GetResponse* out) {
            out->set_found(record.has_value());
            if (record.has_value()) {
              FillRecord(*record, out->mutable_record());
            }
          }));
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Forget(
    grpc::CallbackServerContext* context, const v1::ForgetRequest* request,
    v1::ForgetResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (FinishIfInvalid(reactor, ValidateForget(*request, limits_))) {
    return reactor;
  }
  store_->Forget(request->namespace_(), request->key(),
                 Finisher<bool>(reactor, response,
                                [](bool existed, v1::ForgetResponse* out) {
                                  out->set_existed(existed);
                                }));
  return reactor;
}

}  // namespace dedup
