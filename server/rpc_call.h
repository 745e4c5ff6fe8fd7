// One unary RPC from arrival to answer, shared by the services' handlers.
#ifndef DEDUP_SERVER_RPC_CALL_H_
#define DEDUP_SERVER_RPC_CALL_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/metrics.h"
#include "server/proto_convert.h"
#include "storage/store.h"

namespace dedup {

// Validation messages start with the field name ("key: must be ...").
inline absl::string_view FieldOf(const absl::Status& status) {
  absl::string_view message = status.message();
  return message.substr(0, message.find(':'));
}

// Finishes the reactor exactly once and records the call's duration and
// error code on the way. Cheap to copy (callbacks hold copies); does not own
// `metrics`, which must outlive the call.
class RpcCall {
 public:
  RpcCall(grpc::CallbackServerContext* context, Method method, Metrics* metrics)
      : context_(context),
        reactor_(context->DefaultReactor()),
        method_(method),
        metrics_(metrics),
        start_(std::chrono::steady_clock::now()) {
    metrics_->CallStarted();
  }

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  // The incoming call's context, valid until the call is finished.
  grpc::CallbackServerContext* context() const { return context_; }

  // Keeps `held` (a tenant's in-flight slot) until the call and every copy
  // of it are gone. Call it before the call is copied into callbacks.
  void Hold(std::shared_ptr<void> held) { held_ = std::move(held); }
  Method method() const { return method_; }

  // True (and the call finished) when `validation` failed.
  bool Rejected(const absl::Status& validation) const {
    if (validation.ok()) return false;
    metrics_->RecordInvalid(method_, FieldOf(validation));
    Finish(ToGrpcStatus(validation));
    return true;
  }

  // True (and the call finished with it) when `auth`, the answer of the
  // Authorizer, refuses the call. Refusals are counted by the Authorizer and
  // as errors, not as invalid requests.
  bool Refused(const absl::Status& auth) const {
    if (auth.ok()) return false;
    Finish(ToGrpcStatus(auth));
    return true;
  }

  // Finishes with `error`, passing what its payloads say on to the client
  // as trailing metadata: "dedup-leader" (the leader's address, on a
  // follower's UNAVAILABLE) and "dedup-outcome: unknown" (ABORTED after
  // leadership was lost).
  void Fail(const absl::Status& error) const {
    if (auto leader = error.GetPayload(kLeaderAddressPayload)) {
      context_->AddTrailingMetadata("dedup-leader", std::string(*leader));
    }
    if (auto outcome = error.GetPayload(kOutcomeUnknownPayload)) {
      context_->AddTrailingMetadata("dedup-outcome", std::string(*outcome));
    }
    Finish(ToGrpcStatus(error));
  }

  // `waited`: a Begin parked by its wait_ms, timed apart so that asked-for
  // waiting does not read as latency.
  void Finish(const grpc::Status& status, bool waited = false) const {
    if (!status.ok()) metrics_->RecordError(method_, status.error_code());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    if (waited) {
      metrics_->ObserveWait(seconds);
    } else {
      metrics_->ObserveDuration(method_, seconds);
    }
    metrics_->CallFinished();
    reactor_->Finish(status);
  }

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  const Method method_;
  Metrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<void> held_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_RPC_CALL_H_
