#include "server/forwarder.h"

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "storage/store.h"

namespace dedup {
namespace {

using Done = std::function<void(grpc::Status)>;
using v1::Dedup;

// One overload per method: the forwarding code below is written once for
// every request type.
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::BeginRequest* q,
          v1::BeginResponse* r, Done d) {
  s->async()->Begin(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::CompleteRequest* q,
          v1::CompleteResponse* r, Done d) {
  s->async()->Complete(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::ReleaseRequest* q,
          v1::ReleaseResponse* r, Done d) {
  s->async()->Release(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::RenewRequest* q,
          v1::RenewResponse* r, Done d) {
  s->async()->Renew(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c,
          const v1::CheckpointRequest* q, v1::CheckpointResponse* r, Done d) {
  s->async()->Checkpoint(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::GetRequest* q,
          v1::GetResponse* r, Done d) {
  s->async()->Get(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c, const v1::ForgetRequest* q,
          v1::ForgetResponse* r, Done d) {
  s->async()->Forget(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c,
          const v1::BeginBatchRequest* q, v1::BeginBatchResponse* r, Done d) {
  s->async()->BeginBatch(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c,
          const v1::CompleteBatchRequest* q, v1::CompleteBatchResponse* r,
          Done d) {
  s->async()->CompleteBatch(c, q, r, std::move(d));
}
void Send(Dedup::Stub* s, grpc::ClientContext* c,
          const v1::CheckpointBatchRequest* q, v1::CheckpointBatchResponse* r,
          Done d) {
  s->async()->CheckpointBatch(c, q, r, std::move(d));
}

// Bounded: the result label of dedup_forwarded_calls_total.
constexpr std::array<const char*, 5> kResults = {
    "ok", "error", "unavailable", "deadline_exceeded", "cancelled"};

int ResultIndex(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return 0;
    case grpc::StatusCode::UNAVAILABLE:
      return 2;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 3;
    case grpc::StatusCode::CANCELLED:
      return 4;
    default:
      return 1;
  }
}

// 100 µs to 5 s: one more hop on a LAN, up to a Begin parked by wait_ms.
const prometheus::Histogram::BucketBoundaries& ForwardBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries{
          0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
  return *buckets;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

bool NamesALeader(const grpc::ClientContext& answered) {
  const auto& trailers = answered.GetServerTrailingMetadata();
  return trailers.find("dedup-leader") != trailers.end();
}

// The leader's trailing metadata, for the caller, and "dedup-leader:
// `address`" unless the leader named one itself (it lost leadership
// meanwhile) or the answer is UNAVAILABLE: clients read an UNAVAILABLE
// naming a leader as "nothing happened", which a call broken on its way
// back from the leader cannot promise. gRPC's own trailers ("grpc-*", e.g.
// the status details) travel with the status.
void RelayTrailers(const grpc::Status& status, const grpc::ClientContext& from,
                   grpc::CallbackServerContext* to,
                   const std::string& address) {
  for (const auto& [key, value] : from.GetServerTrailingMetadata()) {
    const std::string name(key.data(), key.size());
    if (absl::StartsWith(name, "grpc-")) continue;
    to->AddTrailingMetadata(name, std::string(value.data(), value.size()));
  }
  if (!NamesALeader(from) &&
      status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    to->AddTrailingMetadata("dedup-leader", address);
  }
}

// "dedup-shard-epoch: `epoch`" unless the leader's trailers had one
// (`from`: null when the answer was assembled from several sub-batches).
void AddShardEpoch(const grpc::ClientContext* from,
                   grpc::CallbackServerContext* to,
                   const std::function<uint64_t()>& epoch) {
  if (!epoch) return;
  if (from != nullptr &&
      from->GetServerTrailingMetadata().count("dedup-shard-epoch") > 0) {
    return;
  }
  const uint64_t now = epoch();
  if (now > 0) to->AddTrailingMetadata("dedup-shard-epoch", absl::StrCat(now));
}

// Whether a sub-batch that failed with `status` certainly changed nothing:
// refused before any item ran (as the leader's own refusals and a channel
// that never connected are). Otherwise its items' outcomes are unknown.
bool NothingHappened(const grpc::Status& status,
                     const grpc::ClientContext& answered) {
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    case grpc::StatusCode::UNAVAILABLE:
      return NamesALeader(answered) ||
             absl::StartsWith(status.error_message(), "not the leader") ||
             absl::StrContains(status.error_message(), "failed to connect");
    default:
      return false;
  }
}

}  // namespace

std::string LeaderAddressInMessage(absl::string_view message) {
  const size_t leader = message.find("leader is ");
  if (leader == absl::string_view::npos) return "";
  const size_t at = message.find(" at ", leader);
  if (at == absl::string_view::npos) return "";
  absl::string_view address = message.substr(at + 4);
  if (address.empty() || absl::StrContains(address, " ") ||
      !absl::StrContains(address, ":")) {
    return "";
  }
  return std::string(address);
}

namespace {

template <typename Request>
constexpr bool kIsBatch = std::is_same_v<Request, v1::BeginBatchRequest> ||
                          std::is_same_v<Request, v1::CompleteBatchRequest> ||
                          std::is_same_v<Request, v1::CheckpointBatchRequest>;

bool DeadlinePassed(const grpc::CallbackServerContext& incoming) {
  return incoming.deadline() <= std::chrono::system_clock::now();
}

// Puts the answers of one sub-batch (`indices` of the caller's batch) in
// their places. When the sub-batch failed as a whole, each of its items
// gets that status if nothing happened, else ABORTED (outcome unknown, as a
// leader answers an item it may or may not have applied).
template <typename BatchResponse>
void PlaceItems(const grpc::Status& status, const grpc::ClientContext& client,
                const BatchResponse& answer, const std::vector<int>& indices,
                BatchResponse* response) {
  const bool complete =
      status.ok() && answer.items_size() == static_cast<int>(indices.size());
  const bool nothing_happened = !status.ok() && NothingHappened(status, client);
  for (size_t k = 0; k < indices.size(); ++k) {
    auto* item = response->mutable_items(indices[k]);
    if (complete) {
      *item = answer.items(static_cast<int>(k));
      continue;
    }
    v1::ItemError* error = item->mutable_error();
    error->Clear();
    if (nothing_happened) {
      error->set_code(static_cast<int>(status.error_code()));
      error->set_message(status.error_message());
    } else {
      error->set_code(static_cast<int>(grpc::StatusCode::ABORTED));
      error->set_message(absl::StrCat(
          "outcome unknown: the call forwarded to the leader ended ",
          status.ok() ? absl::StrCat("with ", answer.items_size(),
                                     " answers for ", indices.size(), " items")
                      : status.error_message()));
    }
  }
}

// Where a call forwarded to `address` and answered `status` may go once
// more: the leader named by a refusal made before it ran (UNAVAILABLE with
// a "dedup-leader" trailer, which only a server's refusal carries), when it
// is another node; else "".
std::string ResendTarget(const grpc::Status& status,
                         const grpc::ClientContext& answered,
                         const std::string& address) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  const auto& trailers = answered.GetServerTrailingMetadata();
  auto it = trailers.find("dedup-leader");
  if (it == trailers.end()) return "";
  std::string hint(it->second.data(), it->second.size());
  return hint == address ? "" : hint;
}

// The same for a batch item answered `error` by `address`: UNAVAILABLE
// naming another leader, not for a reason of its own (a result budget).
// The leader is ItemError.leader; a node from before that field names it
// only in its message, so that is read when the field is empty.
std::string ItemResendTarget(const v1::ItemError& error,
                             const std::string& address) {
  if (error.code() != static_cast<int>(grpc::StatusCode::UNAVAILABLE) ||
      !error.reason().empty()) {
    return "";
  }
  std::string hint = error.leader().empty()
                         ? LeaderAddressInMessage(error.message())
                         : error.leader();
  return hint == address ? "" : hint;
}

}  // namespace

Forwarder::Forwarder(ForwarderOptions options) : options_(std::move(options)) {
  results_ = &prometheus::BuildCounter()
                  .Name("dedup_forwarded_calls_total")
                  .Help(
                      "Calls (and sub-batches) this node forwarded to a "
                      "group's leader, by the leader's answer: ok, error (a "
                      "gRPC error other than those named), unavailable, "
                      "deadline_exceeded, cancelled")
                  .Register(*options_.registry);
  for (const char* result : kResults) results_->Add({{"result", result}});
  resent_ = &prometheus::BuildCounter()
                 .Name("dedup_forward_resent_total")
                 .Help(
                     "Forwarded calls (and batch items) the leader refused "
                     "before proposing them, naming another leader (a "
                     "leadership transfer), that this node sent once more "
                     "to that leader")
                 .Register(*options_.registry)
                 .Add({});
  duration_ = &prometheus::BuildHistogram()
                   .Name("dedup_forward_duration_seconds")
                   .Help("Time from forwarding a call to the leader's answer")
                   .Register(*options_.registry)
                   .Add({}, ForwardBuckets());
}

bool Forwarder::MayForward(const grpc::CallbackServerContext& context) const {
  const auto& metadata = context.client_metadata();
  if (metadata.find(kForwardedMetadata) != metadata.end()) return false;
  return !options_.auth_enabled ||
         metadata.find("authorization") != metadata.end();
}

std::string Forwarder::TargetOf(const absl::Status& error) const {
  if (error.code() != absl::StatusCode::kUnavailable) return "";
  auto leader = error.GetPayload(kLeaderAddressPayload);
  if (!leader.has_value() || leader->empty()) return "";
  std::string address(*leader);
  return address == options_.self_address ? "" : address;
}

std::shared_ptr<grpc::ClientContext> Forwarder::ClientContextFor(
    const grpc::CallbackServerContext& incoming) const {
  // A child of the incoming call: its deadline, and its cancellation
  // cancels this one.
  std::shared_ptr<grpc::ClientContext> client =
      grpc::ClientContext::FromCallbackServerContext(incoming);
  const auto& metadata = incoming.client_metadata();
  for (auto [it, end] = metadata.equal_range("authorization"); it != end;
       ++it) {
    client->AddMetadata("authorization",
                        std::string(it->second.data(), it->second.size()));
  }
  client->AddMetadata(kForwardedMetadata, absl::StrCat(options_.node_id));
  return client;
}

v1::Dedup::Stub* Forwarder::StubFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<v1::Dedup::Stub>& stub = stubs_[address];
  // Opening a channel does not connect: cheap under the lock.
  if (stub == nullptr) stub = v1::Dedup::NewStub(options_.open(address));
  return stub.get();
}

void Forwarder::Record(const grpc::Status& status, double seconds) const {
  results_->Add({{"result", kResults[ResultIndex(status)]}}).Increment();
  duration_->Observe(seconds);
}

template <typename Request, typename Response>
void Forwarder::Forward(const RpcCall& call, const std::string& address,
                        const Request* request, Response* response) {
  SendOnce(call, address, request, response, /*may_resend=*/true);
}

template <typename Request, typename Response>
void Forwarder::SendOnce(const RpcCall& call, const std::string& address,
                         const Request* request, Response* response,
                         bool may_resend) {
  std::shared_ptr<grpc::ClientContext> client =
      ClientContextFor(*call.context());
  const auto start = std::chrono::steady_clock::now();
  // The leader writes straight into the caller's response.
  Send(StubFor(address), client.get(), request, response,
       [this, call, client, address, start, request, response,
        may_resend](grpc::Status status) {
         Record(status, SecondsSince(start));
         const std::string target =
             may_resend ? ResendTarget(status, *client, address) : "";
         if (!target.empty() && !DeadlinePassed(*call.context())) {
           resent_->Increment();
           response->Clear();
           SendOnce(call, target, request, response, /*may_resend=*/false);
           return;
         }
         RelayTrailers(status, *client, call.context(), address);
         AddShardEpoch(client.get(), call.context(), options_.shard_epoch);
         if constexpr (kIsBatch<Request>) {
           if (may_resend && status.ok() &&
               ResendRefusedItems(call, address, request, response)) {
             return;
           }
         }
         call.Finish(status);
       });
}

template <typename BatchRequest, typename BatchResponse>
void Forwarder::ForwardItems(const RpcCall& call,
                             std::vector<DeferredItem> items,
                             const BatchRequest* request,
                             BatchResponse* response) {
  std::map<std::string, std::vector<int>> by_address;
  for (const DeferredItem& item : items) {
    by_address[item.address].push_back(item.index);
  }
  auto remaining =
      std::make_shared<std::atomic<int>>(static_cast<int>(by_address.size()));
  for (auto& [address, indices] : by_address) {
    SendItems(call, address, std::move(indices), request, response, remaining,
              /*may_resend=*/true);
  }
}

template <typename BatchRequest, typename BatchResponse>
bool Forwarder::ResendRefusedItems(const RpcCall& call,
                                   const std::string& address,
                                   const BatchRequest* request,
                                   BatchResponse* response) {
  if (DeadlinePassed(*call.context()) ||
      response->items_size() != request->items_size()) {
    return false;
  }
  std::vector<int> all(static_cast<size_t>(request->items_size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  std::map<std::string, std::vector<int>> by_target =
      ItemsToResend(address, all, *response);
  if (by_target.empty()) return false;
  auto remaining =
      std::make_shared<std::atomic<int>>(static_cast<int>(by_target.size()));
  for (auto& [target, again] : by_target) {
    resent_->Increment(static_cast<double>(again.size()));
    SendItems(call, target, std::move(again), request, response, remaining,
              /*may_resend=*/false);
  }
  return true;
}

template <typename BatchRequest, typename BatchResponse>
void Forwarder::SendItems(const RpcCall& call, const std::string& address,
                          std::vector<int> indices, const BatchRequest* request,
                          BatchResponse* response,
                          std::shared_ptr<std::atomic<int>> remaining,
                          bool may_resend) {
  auto sub = std::make_shared<BatchRequest>();
  for (int i : indices) *sub->add_items() = request->items(i);
  auto answer = std::make_shared<BatchResponse>();
  std::shared_ptr<grpc::ClientContext> client =
      ClientContextFor(*call.context());
  const auto start = std::chrono::steady_clock::now();
  // Each sub-batch writes only its own items: the answers' slots exist
  // already, so callbacks on different threads never meet.
  Send(StubFor(address), client.get(), sub.get(), answer.get(),
       [this, call, client, sub, answer, address, indices = std::move(indices),
        request, response, remaining, start, may_resend](grpc::Status status) {
         Record(status, SecondsSince(start));
         PlaceItems(status, *client, *answer, indices, response);
         if (may_resend && !DeadlinePassed(*call.context())) {
           std::map<std::string, std::vector<int>> by_target;
           // Refused as a whole before any item ran, naming another leader.
           if (std::string target = ResendTarget(status, *client, address);
               !target.empty()) {
             by_target[target] = indices;
           } else if (status.ok()) {
             by_target = ItemsToResend(address, indices, *response);
           }
           for (auto& [target, again] : by_target) {
             resent_->Increment(static_cast<double>(again.size()));
             remaining->fetch_add(1, std::memory_order_acq_rel);
             SendItems(call, target, std::move(again), request, response,
                       remaining, /*may_resend=*/false);
           }
         }
         if (remaining->fetch_sub(1, std::memory_order_acq_rel) == 1) {
           AddShardEpoch(nullptr, call.context(), options_.shard_epoch);
           call.Finish(grpc::Status::OK);
         }
       });
}

template <typename BatchResponse>
std::map<std::string, std::vector<int>> Forwarder::ItemsToResend(
    const std::string& address, const std::vector<int>& indices,
    const BatchResponse& response) {
  std::map<std::string, std::vector<int>> by_target;
  for (int i : indices) {
    const auto& item = response.items(i);
    if (!item.has_error()) continue;
    std::string target = ItemResendTarget(item.error(), address);
    if (!target.empty()) by_target[target].push_back(i);
  }
  return by_target;
}

#define DEDUP_FORWARD(Name)                                            \
  template void Forwarder::Forward(const RpcCall&, const std::string&, \
                                   const v1::Name##Request*,           \
                                   v1::Name##Response*);
DEDUP_FORWARD(Begin)
DEDUP_FORWARD(Complete)
DEDUP_FORWARD(Release)
DEDUP_FORWARD(Renew)
DEDUP_FORWARD(Checkpoint)
DEDUP_FORWARD(Get)
DEDUP_FORWARD(Forget)
DEDUP_FORWARD(BeginBatch)
DEDUP_FORWARD(CompleteBatch)
DEDUP_FORWARD(CheckpointBatch)
#undef DEDUP_FORWARD

#define DEDUP_FORWARD_ITEMS(Name)                                          \
  template void Forwarder::ForwardItems(                                   \
      const RpcCall&, std::vector<DeferredItem>, const v1::Name##Request*, \
      v1::Name##Response*);
DEDUP_FORWARD_ITEMS(BeginBatch)
DEDUP_FORWARD_ITEMS(CompleteBatch)
DEDUP_FORWARD_ITEMS(CheckpointBatch)
#undef DEDUP_FORWARD_ITEMS

}  // namespace dedup
