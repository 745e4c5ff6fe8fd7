// An in-process dedup.v1.Dedup server whose answers each test scripts, for
// exercising client logic (retries, deadlines, RunOnce branches) without the
// real authority. Thread-safe.
#ifndef DEDUP_TESTS_CLIENT_FAKE_DEDUP_SERVICE_H_
#define DEDUP_TESTS_CLIENT_FAKE_DEDUP_SERVICE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::testing {

class FakeDedupService final : public v1::Dedup::Service {
 public:
  template <typename Request, typename Response>
  using Handler = std::function<grpc::Status(const Request&, Response*)>;

  // What the server saw of one call.
  template <typename Request>
  struct Seen {
    Request request;
    absl::Duration deadline_left;  // Deadline minus arrival time.
  };

  void OnBegin(Handler<v1::BeginRequest, v1::BeginResponse> h) {
    absl::MutexLock lock(&mu_);
    on_begin_ = std::move(h);
  }
  void OnComplete(Handler<v1::CompleteRequest, v1::CompleteResponse> h) {
    absl::MutexLock lock(&mu_);
    on_complete_ = std::move(h);
  }
  void OnRelease(Handler<v1::ReleaseRequest, v1::ReleaseResponse> h) {
    absl::MutexLock lock(&mu_);
    on_release_ = std::move(h);
  }

  std::vector<Seen<v1::BeginRequest>> begins() const {
    absl::MutexLock lock(&mu_);
    return begins_;
  }
  std::vector<Seen<v1::CompleteRequest>> completes() const {
    absl::MutexLock lock(&mu_);
    return completes_;
  }
  std::vector<Seen<v1::ReleaseRequest>> releases() const {
    absl::MutexLock lock(&mu_);
    return releases_;
  }
  int gets() const {
    absl::MutexLock lock(&mu_);
    return gets_;
  }

  grpc::Status Begin(grpc::ServerContext* context,
                     const v1::BeginRequest* request,
                     v1::BeginResponse* response) override {
    return Dispatch(context, *request, response, &FakeDedupService::begins_,
                    &FakeDedupService::on_begin_);
  }
  grpc::Status Complete(grpc::ServerContext* context,
                        const v1::CompleteRequest* request,
                        v1::CompleteResponse* response) override {
    return Dispatch(context, *request, response, &FakeDedupService::completes_,
                    &FakeDedupService::on_complete_);
  }
  grpc::Status Release(grpc::ServerContext* context,
                       const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override {
    return Dispatch(context, *request, response, &FakeDedupService::releases_,
                    &FakeDedupService::on_release_);
  }
  // Always UNAVAILABLE, counting calls: enough to test retries of a
  // non-Begin method.
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*,
                   v1::GetResponse*) override {
    absl::MutexLock lock(&mu_);
    ++gets_;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake: try later");
  }

 private:
  // Member pointers rather than references, so every access to the guarded
  // members visibly happens under mu_.
  template <typename Request, typename Response>
  grpc::Status Dispatch(grpc::ServerContext* context, const Request& request,
                        Response* response,
                        std::vector<Seen<Request>> FakeDedupService::*seen,
                        Handler<Request, Response> FakeDedupService::*handler) {
    Handler<Request, Response> h;
    {
      absl::MutexLock lock(&mu_);
      (this->*seen)
          .push_back(
              {request, absl::FromChrono(context->deadline()) - absl::Now()});
      h = this->*handler;
    }
    // Run outside the lock: handlers may sleep.
    if (!h) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fake");
    return h(request, response);
  }

  mutable absl::Mutex mu_;
  Handler<v1::BeginRequest, v1::BeginResponse> on_begin_ ABSL_GUARDED_BY(mu_);
  Handler<v1::CompleteRequest, v1::CompleteResponse> on_complete_
      ABSL_GUARDED_BY(mu_);
  Handler<v1::ReleaseRequest, v1::ReleaseResponse> on_release_
      ABSL_GUARDED_BY(mu_);
  std::vector<Seen<v1::BeginRequest>> begins_ ABSL_GUARDED_BY(mu_);
  std::vector<Seen<v1::CompleteRequest>> completes_ ABSL_GUARDED_BY(mu_);
  std::vector<Seen<v1::ReleaseRequest>> releases_ ABSL_GUARDED_BY(mu_);
  int gets_ ABSL_GUARDED_BY(mu_) = 0;
};

// Serves a FakeDedupService on a free loopback port for the object's life.
class FakeServer {
 public:
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(); }

  FakeDedupService& service() { return service_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  FakeDedupService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_CLIENT_FAKE_DEDUP_SERVICE_H_
