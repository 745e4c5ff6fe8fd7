// An in-process dedup.v1.Dedup node whose every answer a test scripts, with
// access to the server context so the script can send trailing metadata
// ("dedup-leader", "dedup-outcome") as a cluster node would. Several of them
// make a fake group for testing leader following and unknown-outcome retries
// without real processes. Records every call. Thread-safe.
#ifndef DEDUP_TESTS_CLIENT_SCRIPTED_NODE_H_
#define DEDUP_TESTS_CLIENT_SCRIPTED_NODE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace dedup::testing {

class ScriptedNode final : public v1::Dedup::Service {
 public:
  // `method` is the RPC name ("Begin", "BeginBatch", ...); downcast the
  // messages to its types. No script: UNIMPLEMENTED.
  using Script = std::function<grpc::Status(
      const std::string& method, grpc::ServerContext* context,
      const google::protobuf::Message& request,
      google::protobuf::Message* response)>;

  struct Call {
    std::string method;
    std::shared_ptr<google::protobuf::Message> request;
    absl::Duration deadline_left;  // Deadline minus arrival time.
  };

  ScriptedNode() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedNode() override { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void SetScript(Script script) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(script);
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // The requests of `method`, in arrival order.
  template <typename Request>
  std::vector<Request> requests(const std::string& method) const {
    std::vector<Request> out;
    for (const Call& call : calls()) {
      if (call.method == method) {
        out.push_back(static_cast<const Request&>(*call.request));
      }
    }
    return out;
  }

  grpc::Status Begin(grpc::ServerContext* c, const v1::BeginRequest* q,
                     v1::BeginResponse* r) override {
    return Handle("Begin", c, *q, r);
  }
  grpc::Status Complete(grpc::ServerContext* c, const v1::CompleteRequest* q,
                        v1::CompleteResponse* r) override {
    return Handle("Complete", c, *q, r);
  }
  grpc::Status Release(grpc::ServerContext* c, const v1::ReleaseRequest* q,
                       v1::ReleaseResponse* r) override {
    return Handle("Release", c, *q, r);
  }
  grpc::Status Renew(grpc::ServerContext* c, const v1::RenewRequest* q,
                     v1::RenewResponse* r) override {
    return Handle("Renew", c, *q, r);
  }
  grpc::Status Get(grpc::ServerContext* c, const v1::GetRequest* q,
                   v1::GetResponse* r) override {
    return Handle("Get", c, *q, r);
  }
  grpc::Status BeginBatch(grpc::ServerContext* c,
                          const v1::BeginBatchRequest* q,
                          v1::BeginBatchResponse* r) override {
    return Handle("BeginBatch", c, *q, r);
  }
  grpc::Status CompleteBatch(grpc::ServerContext* c,
                             const v1::CompleteBatchRequest* q,
                             v1::CompleteBatchResponse* r) override {
    return Handle("CompleteBatch", c, *q, r);
  }
  grpc::Status Checkpoint(grpc::ServerContext* c,
                          const v1::CheckpointRequest* q,
                          v1::CheckpointResponse* r) override {
    return Handle("Checkpoint", c, *q, r);
  }
  grpc::Status CheckpointBatch(grpc::ServerContext* c,
                               const v1::CheckpointBatchRequest* q,
                               v1::CheckpointBatchResponse* r) override {
    return Handle("CheckpointBatch", c, *q, r);
  }

 private:
  template <typename Request>
  grpc::Status Handle(const std::string& method, grpc::ServerContext* context,
                      const Request& request,
                      google::protobuf::Message* response) {
    Script script;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back({method, std::make_shared<Request>(request),
                        absl::FromChrono(context->deadline()) - absl::Now()});
      script = script_;
    }
    if (!script) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method);
    return script(method, context, request, response);
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// A follower's answer: UNAVAILABLE naming `leader` (none when empty).
inline grpc::Status NotLeader(grpc::ServerContext* context,
                              const std::string& leader) {
  if (!leader.empty()) context->AddTrailingMetadata("dedup-leader", leader);
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader");
}

// A deposed leader's answer to an operation it had proposed.
inline grpc::Status OutcomeUnknown(grpc::ServerContext* context) {
  context->AddTrailingMetadata("dedup-outcome", "unknown");
  return grpc::Status(grpc::StatusCode::ABORTED,
                      "leadership lost; outcome unknown");
}

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_CLIENT_SCRIPTED_NODE_H_
