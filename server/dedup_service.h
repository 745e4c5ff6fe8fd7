// The dedup.v1.Dedup gRPC service: validates each request, hands it to the
// store, and finishes the call from the store's callback. Handlers never
// block: gRPC's callback threads are few, and a storage write may wait for an
// fsync.
#ifndef DEDUP_SERVER_DEDUP_SERVICE_H_
#define DEDUP_SERVER_DEDUP_SERVICE_H_

#include <atomic>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "server/auth.h"
#include "server/event_log.h"
#include "server/forwarder.h"
#include "server/lame_duck.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/namespace_policy.h"
#include "server/rpc_call.h"
#include "storage/clock.h"
#include "storage/store.h"

namespace dedup {

class SessionReactor;

// Thread-safe. Owns none of its pointers: `store`, `metrics`, `auth`,
// `events` (null: no event log) and `policies` (null: `limits` for every
// namespace) must outlive every call (shut the gRPC server down before
// closing the store).
class DedupService final : public v1::Dedup::CallbackService {
 public:
  DedupService(Store* store, const Limits& limits, Metrics* metrics,
               const Authorizer* auth, EventLog* events,
               const PolicyFile* policies = nullptr)
      : store_(store),
        limits_(limits),
        metrics_(metrics),
        auth_(auth),
        events_(events),
        policies_(policies) {}

  // For shutdown: from now on every call is answered UNAVAILABLE (with the
  // leader's address in cluster mode), so clients retry elsewhere instead
  // of losing calls when the connections close. Any thread.
  void EnterLameDuck();

  // Calls a follower would refuse UNAVAILABLE naming the leader go on to
  // that leader through `forwarder` (forwarder.h; not owned, must outlive
  // every call). Before serving; without it the refusal is the answer.
  void EnableForwarding(Forwarder* forwarder) { forwarder_ = forwarder; }

  grpc::ServerUnaryReactor* Begin(grpc::CallbackServerContext* context,
                                  const v1::BeginRequest* request,
                                  v1::BeginResponse* response) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context,
                                     const v1::CompleteRequest* request,
                                     v1::CompleteResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Renew(grpc::CallbackServerContext* context,
                                  const v1::RenewRequest* request,
                                  v1::RenewResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(
      grpc::CallbackServerContext* context,
      const v1::CheckpointRequest* request,
      v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Forget(grpc::CallbackServerContext* context,
                                   const v1::ForgetRequest* request,
                                   v1::ForgetResponse* response) override;

  grpc::ServerUnaryReactor* BeginBatch(
      grpc::CallbackServerContext* context,
      const v1::BeginBatchRequest* request,
      v1::BeginBatchResponse* response) override;
  grpc::ServerUnaryReactor* CompleteBatch(
      grpc::CallbackServerContext* context,
      const v1::CompleteBatchRequest* request,
      v1::CompleteBatchResponse* response) override;
  grpc::ServerUnaryReactor* CheckpointBatch(
      grpc::CallbackServerContext* context,
      const v1::CheckpointBatchRequest* request,
      v1::CheckpointBatchResponse* response) override;

  // A session stream (session_reactor.h).
  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(
      grpc::CallbackServerContext* context) override;

 private:
  friend class SessionReactor;
  // Judges one session operation as CheckBatchItem does a batch item (an
  // unset op: INVALID_ARGUMENT "op: not set"). Sets *policy.
  absl::Status CheckSessionOp(const Caller& caller, const v1::SessionOp& op,
                              EffectivePolicy* policy) const;
  // The open streams, stopped by EnterLameDuck. A stream registers once
  // started and unregisters in its OnDone.
  void AddSession(SessionReactor* session) const;
  void RemoveSession(SessionReactor* session) const;

  enum class Access { kWrite, kRead };
  // Whether the store can take operations now: not, e.g., a follower in
  // cluster mode (UNAVAILABLE naming the leader). Reads (`kRead`) are still
  // served by a single node whose writes are stopped
  // (Store::CheckServingReads).
  absl::Status Serving(Access access) const;
  // True (and the call finished, or forwarded to the leader) when the store
  // cannot take operations now.
  template <typename Request, typename Response>
  bool NotServing(const RpcCall& call, const Request* request,
                  Response* response, Access access = Access::kWrite) const {
    absl::Status serving = Serving(access);
    if (serving.ok()) return false;
    FailOrForward(call, serving, request, response);
    return true;
  }
  // Finishes `call` with `error`, or forwards `request` to the leader that
  // `error` names when forwarding is on and the call may be forwarded.
  template <typename Request, typename Response>
  void FailOrForward(const RpcCall& call, const absl::Status& error,
                     const Request* request, Response* response) const {
    if (ForwardsCall(*call.context())) {
      const std::string leader = forwarder_->TargetOf(error);
      if (!leader.empty()) {
        return forwarder_->Forward(call, leader, request, response);
      }
    }
    call.Fail(error);
  }
  // Whether a call refused with a leader hint goes on to the leader: on,
  // not forwarded already, a credential that can travel, no lame duck.
  bool ForwardsCall(const grpc::CallbackServerContext& context) const;
  // The forwarder for a batch's items refused with a leader hint, or null
  // when they are answered with that refusal.
  Forwarder* ItemForwarder(const grpc::CallbackServerContext& context) const {
    return ForwardsCall(context) ? forwarder_ : nullptr;
  }
  // The whole check of a unary call (Authorizer::Authorize, its namespace,
  // then the tenant's limits, whose in-flight slot `call` holds); `what`
  // names the method in a refusal. `may_store_more`: the call may grow
  // what the tenant stores with a new claim (Begin), so its stored_bytes
  // limit applies too. (Never Complete: see DedupService::Complete.)
  absl::Status Authorize(const grpc::CallbackServerContext& context,
                         TenantRole role, absl::string_view what,
                         absl::string_view ns, RpcCall* call,
                         bool may_store_more = false) const;
  // The checks a batch call passes before its items: the caller, the item
  // count, for `may_store_more` the tenant's stored_bytes limit and its rate
  // (each item counts; `call` holds the slot). The caller, or nullopt once
  // `call` was finished with the refusal.
  std::optional<Caller> AdmitBatch(const grpc::CallbackServerContext& context,
                                   absl::string_view what, int items,
                                   bool may_store_more, RpcCall* call) const;
  // NotServing for a batch of `items` whose item checks (all made before
  // routing) left `to_store` for the store: false without asking when every
  // item was refused, since those answers do not depend on the leader.
  template <typename Request, typename Response>
  bool BatchNotServing(const RpcCall& call, int items, int to_store,
                       const Request* request, Response* response) const {
    // Every item refused: the answer is this node's to give, as a leader's
    // would be (a foreign namespace is PERMISSION_DENIED on any node).
    if (items > 0 && to_store == 0) return false;
    return NotServing(call, request, response);
  }
  // Judges one batch item: `caller` may use `ns`, then `validate` (the
  // item's own checks against its namespace's limits) passes, a refusal
  // naming the policy and counted as invalid for `method`. Sets *policy.
  absl::Status CheckBatchItem(
      const Caller& caller, Method method, absl::string_view ns,
      absl::FunctionRef<absl::Status(const Limits&)> validate,
      EffectivePolicy* policy) const;
  LameDuck lame_duck_;
  // Request → storage parameters, defaults resolved (shared by the unary and
  // batch handlers).
  BeginParams BeginParamsOf(const v1::BeginRequest& request,
                            const EffectivePolicy& policy) const;
  CompleteParams CompleteParamsOf(const v1::CompleteRequest& request,
                                  const EffectivePolicy& policy) const;
  static CheckpointParams CheckpointParamsOf(
      const v1::CheckpointRequest& request);
  // The defaults and limits of namespace `ns` (per-namespace policy).
  EffectivePolicy PolicyFor(absl::string_view ns) const;
  // Counts an answer and logs it when it is an event worth investigating.
  void Observe(const v1::BeginRequest& request, const BeginResult& r) const;
  template <typename Request>
  void Observe(Method method, const Request& request,
               const FencedDecision& d) const;

  template <typename Request, typename Response, typename Fill>
  StoreCallback<FencedDecision> Fenced(const RpcCall& call,
                                       const Request* request,
                                       Response* response, Fill fill) const;

  Store* const store_;
  const Limits limits_;
  Metrics* const metrics_;
  const Authorizer* const auth_;
  EventLog* const events_;
  const PolicyFile* const policies_;
  Forwarder* forwarder_ = nullptr;
  mutable absl::Mutex sessions_mu_;
  mutable absl::flat_hash_set<SessionReactor*> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
};

}  // namespace dedup

#endif  // DEDUP_SERVER_DEDUP_SERVICE_H_
