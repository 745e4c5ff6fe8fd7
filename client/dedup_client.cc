#include "client/dedup_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/batch_answers.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace dedup {
namespace {

template <typename Request, typename Response>
using RpcMethod = grpc::Status (v1::Dedup::StubInterface::*)(
    grpc::ClientContext*, const Request&, Response*);

// Runs one unary RPC with per-attempt deadlines, retrying UNAVAILABLE only:
// every other code either is an answer or will not change by retrying.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(v1::Dedup::StubInterface& stub,
                              RpcMethod<Request, Response> method,
                              const ClientOptions& options,
                              const Request& request,
                              absl::Duration extra_deadline) {
  const int max_attempts = std::max(options.max_attempts, 1);
  grpc::Status status;
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    if (attempt > 0) {
      absl::SleepFor(FullJitterBackoff(options.backoff, attempt - 1,
                                       ThreadLocalUniform01));
    }
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options.deadline + extra_deadline));
    Response response;
    status = (stub.*method)(&context, request, &response);
    if (status.ok()) return response;
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
  }
  return ToAbslStatus(status);
}

}  // namespace

Client::Client(const std::string& target, ClientOptions options)
    : Client(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()),
             std::move(options)) {}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(std::move(options)), stub_(v1::Dedup::NewStub(channel)) {}

Client::~Client() = default;

absl::StatusOr<v1::BeginResponse> Client::Begin(
    absl::string_view ns, absl::string_view key, absl::string_view args_hash,
    const BeginOptions& options) const {
  v1::BeginRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_args_hash(std::string(args_hash));
  request.set_owner(options.owner);
  request.set_lease_ms(options.lease_ms);
  request.set_ttl_s(options.ttl_s);
  request.set_wait_ms(options.wait_ms);
  return Call(*stub_, &v1::Dedup::StubInterface::Begin, options_, request,
              absl::Milliseconds(options.wait_ms));
}

absl::StatusOr<v1::CompleteResponse> Client::Complete(
    absl::string_view ns, absl::string_view key, uint64_t fence,
    v1::Outcome outcome, absl::string_view result, uint32_t ttl_s) const {
  v1::CompleteRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  request.set_outcome(outcome);
  request.set_result(std::string(result));
  request.set_ttl_s(ttl_s);
  return Call(*stub_, &v1::Dedup::StubInterface::Complete, options_, request,
              absl::ZeroDuration());
}

absl::StatusOr<v1::ReleaseResponse> Client::Release(absl::string_view ns,
                                                    absl::string_view key,
                                                    uint64_t fence) const {
  v1::ReleaseRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  return Call(*stub_, &v1::Dedup::StubInterface::Release, options_, request,
              absl::ZeroDuration());
}

absl::StatusOr<v1::RenewResponse> Client::Renew(absl::string_view ns,
                                                absl::string_view key,
                                                uint64_t fence,
                                                uint32_t lease_ms) const {
  v1::RenewRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  request.set_lease_ms(lease_ms);
  return Call(*stub_, &v1::Dedup::StubInterface::Renew, options_, request,
              absl::ZeroDuration());
}

absl::StatusOr<v1::GetResponse> Client::Get(absl::string_view ns,
                                            absl::string_view key) const {
  v1::GetRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  return Call(*stub_, &v1::Dedup::StubInterface::Get, options_, request,
              absl::ZeroDuration());
}

absl::StatusOr<v1::ForgetResponse> Client::Forget(absl::string_view ns,
                                                  absl::string_view key) const {
  v1::ForgetRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  return Call(*stub_, &v1::Dedup::StubInterface::Forget, options_, request,
              absl::ZeroDuration());
}

absl::StatusOr<BeginBatchResults> Client::BeginBatch(
    const std::vector<BeginBatchItem>& items) const {
  v1::BeginBatchRequest request;
  request.mutable_items()->Reserve(static_cast<int>(items.size()));
  for (const BeginBatchItem& item : items) {
    ToProto(item, request.add_items());
  }
  // Built once and re-sent as is by every attempt: that keeps each item's
  // owner across retries. No extra deadline: batch items never wait.
  return FromBatchResponse<v1::BeginResponse>(
      "BeginBatch", request.items_size(),
      Call(*stub_, &v1::Dedup::StubInterface::BeginBatch, options_, request,
           absl::ZeroDuration()));
}

absl::StatusOr<CompleteBatchResults> Client::CompleteBatch(
    const std::vector<CompleteBatchItem>& items) const {
  v1::CompleteBatchRequest request;
  request.mutable_items()->Reserve(static_cast<int>(items.size()));
  for (const CompleteBatchItem& item : items) {
    ToProto(item, request.add_items());
  }
  return FromBatchResponse<v1::CompleteResponse>(
      "CompleteBatch", request.items_size(),
      Call(*stub_, &v1::Dedup::StubInterface::CompleteBatch, options_, request,
           absl::ZeroDuration()));
}

}  // namespace dedup
