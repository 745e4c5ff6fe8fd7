// In-process gRPC servers for client tests: BatchService answers
// BeginBatch/CompleteBatch from test-supplied handlers and records what it
// received; InProcessServer serves a service on a free loopback port.
// Thread-safe.
#ifndef DEDUP_TESTS_CLIENT_BATCH_SERVICE_H_
#define DEDUP_TESTS_CLIENT_BATCH_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup {

// Serves BeginBatch and CompleteBatch from test-supplied handlers, recording
// every request and how much of its deadline was left on arrival.
class BatchService final : public v1::Dedup::Service {
 public:
  using BeginHandler = std::function<grpc::Status(const v1::BeginBatchRequest&,
                                                  v1::BeginBatchResponse*)>;
  using CompleteHandler = std::function<grpc::Status(
      const v1::CompleteBatchRequest&, v1::CompleteBatchResponse*)>;

  explicit BatchService(BeginHandler on_begin,
                        CompleteHandler on_complete = nullptr)
      : on_begin_(std::move(on_begin)), on_complete_(std::move(on_complete)) {}

  grpc::Status BeginBatch(grpc::ServerContext* context,
                          const v1::BeginBatchRequest* request,
                          v1::BeginBatchResponse* response) override {
    Record(*context);
    {
      absl::MutexLock lock(&mu_);
      begins_.push_back(*request);
    }
    return on_begin_(*request, response);
  }
  grpc::Status CompleteBatch(grpc::ServerContext* context,
                             const v1::CompleteBatchRequest* request,
                             v1::CompleteBatchResponse* response) override {
    Record(*context);
    {
      absl::MutexLock lock(&mu_);
      completes_.push_back(*request);
    }
    if (!on_complete_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
    return on_complete_(*request, response);
  }

  std::vector<v1::BeginBatchRequest> begins() const {
    absl::MutexLock lock(&mu_);
    return begins_;
  }
  std::vector<v1::CompleteBatchRequest> completes() const {
    absl::MutexLock lock(&mu_);
    return completes_;
  }
  std::vector<absl::Duration> deadlines_left() const {
    absl::MutexLock lock(&mu_);
    return deadlines_left_;
  }

 private:
  void Record(const grpc::ServerContext& context) {
    absl::MutexLock lock(&mu_);
    deadlines_left_.push_back(absl::FromChrono(context.deadline()) -
                              absl::Now());
  }

  const BeginHandler on_begin_;
  const CompleteHandler on_complete_;
  mutable absl::Mutex mu_;
  std::vector<v1::BeginBatchRequest> begins_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CompleteBatchRequest> completes_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> deadlines_left_ ABSL_GUARDED_BY(mu_);
};

// Serves `service` on a free loopback port for the object's life.
class InProcessServer {
 public:
  explicit InProcessServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~InProcessServer() { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dedup

#endif  // DEDUP_TESTS_CLIENT_BATCH_SERVICE_H_
