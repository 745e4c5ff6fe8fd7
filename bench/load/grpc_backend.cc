#include "bench/load/grpc_backend.h"

#include <chrono>
#include <utility>

#include "bench/load/batch_split.h"
#include "grpcpp/grpcpp.h"

namespace dedup::bench {
namespace {

// Generous: a benchmark call that takes this long is an error worth seeing,
// not a latency sample.
constexpr auto kDeadline = std::chrono::seconds(30);

// Owns everything one callback-API call needs until its callback runs.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext context;
  Req request;
  Resp response;
};

template <typename Req, typename Resp>
std::unique_ptr<Call<Req, Resp>> NewCall() {
  auto call = std::make_unique<Call<Req, Resp>>();
  call->context.set_deadline(std::chrono::system_clock::now() + kDeadline);
  return call;
}

std::string ErrorOf(const grpc::Status& status) {
  return "grpc " + std::to_string(status.error_code()) + ": " +
         status.error_message();
}

BeginAnswer FromProto(const v1::BeginResponse& r) {
  BeginAnswer a;
  a.fence = r.fence();
  switch (r.status()) {
    case v1::BeginResponse::STARTED:
      a.status = BeginStatus::kStarted;
      break;
    case v1::BeginResponse::IN_USE:
      a.status = BeginStatus::kInUse;
      break;
    case v1::BeginResponse::CONFLICT:
      a.status = BeginStatus::kConflict;
      break;
    case v1::BeginResponse::DUPLICATE:
      a.status = BeginStatus::kDuplicate;
      break;
    default:
      a.error = "unknown Begin status";
      break;
  }
  return a;
}

FencedAnswer FromProto(v1::CompleteResponse::Status s, uint64_t fence) {
  FencedAnswer a;
  a.fence = fence;
  switch (s) {
    case v1::CompleteResponse::OK:
      a.status = FencedStatus::kOk;
      break;
    case v1::CompleteResponse::STALE_FENCE:
      a.status = FencedStatus::kStaleFence;
      break;
    case v1::CompleteResponse::NOT_FOUND:
      a.status = FencedStatus::kNotFound;
      break;
    case v1::CompleteResponse::ALREADY_COMPLETED:
      a.status = FencedStatus::kAlreadyCompleted;
      break;
    default:
      a.error = "unknown fenced status";
      break;
  }
  return a;
}

// A coalesced call's answer in the backend's vocabulary.
template <typename Answer, typename Response, typename Convert>
Answer FromCoalesced(const absl::StatusOr<Response>& r, Convert convert) {
  if (r.ok()) return convert(*r);
  Answer a;
  a.error = r.status().ToString();
  return a;
}

}  // namespace

GrpcBackend::GrpcBackend(std::string address, std::string ns, int channels,
                         int coalesce_in_flight, RouteMode route, bool stream)
    : address_(std::move(address)),
      ns_(std::move(ns)),
      channels_(channels),
      coalesce_in_flight_(
          stream && coalesce_in_flight == 0 ? 2 : coalesce_in_flight),
      stream_(stream),
      route_(route) {}

GrpcBackend::~GrpcBackend() = default;

std::string GrpcBackend::Start() {
  for (int i = 0; i < channels_; ++i) {
    grpc::ChannelArguments args;
    // A distinct argument makes a distinct subchannel: one TCP connection
    // per channel, as separate client processes would have.
    args.SetInt(kChannelArg, i);
    auto channel = grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::seconds(10))) {
      return "cannot connect to " + address_;
    }
    dedup_.push_back(v1::Dedup::NewStub(channel));
    dedup_channels_.push_back(channel);
    bench_.push_back(v1::Bench::NewStub(channel));
  }
  if (std::string e = StartRouting(); !e.empty()) return e;
  for (int i = 0; i < channels_ && coalesce_in_flight_ > 0; ++i) {
    CoalescingOptions options;
    options.rpc.deadline = absl::FromChrono(kDeadline);
    options.rpc.max_attempts = 1;  // a benchmark reports errors, not retries
    options.max_batches_in_flight = coalesce_in_flight_;
    options.stream = stream_;
    // Its group leaders' channels are this connection's too.
    if (routes_ != nullptr) {
      options.rpc.channel_factory = ConnectionChannelFactory(i);
    }
    coalescers_.push_back(
        std::make_unique<CoalescingClient>(dedup_channels_[i], options));
  }
  timers_ = std::make_unique<TimerThread>();
  return "";
}

std::string GrpcBackend::StartRouting() {
  if (route_ == RouteMode::kFixed) return "";
  const absl::StatusOr<int> groups = ShardGroupCount(dedup_channels_[0]);
  if (route_ == RouteMode::kAuto && (!groups.ok() || *groups <= 1)) return "";
  if (!groups.ok()) return "--route=shard: " + groups.status().ToString();
  routes_ = std::make_unique<SlotRoutes>(address_, channels_);
  if (std::string e = routes_->Start(); !e.empty()) return e;
  routed_groups_ = *groups;
  return "";
}

CallTarget GrpcBackend::FixedTarget(int conn) const {
  CallTarget t;
  t.stub = dedup_[conn].get();
  return t;
}

CallTarget GrpcBackend::TargetOf(int conn, const std::string& key) const {
  if (routes_ != nullptr) return routes_->OfKey(conn, ns_, key);
  return FixedTarget(conn);
}

void GrpcBackend::Stop() {
  timers_.reset();
  coalescers_.clear();  // waits for their outstanding calls
}

void GrpcBackend::RunAt(int conn, Clock::time_point when,
                        std::function<void()> fn) {
  // Calls are non-blocking, so a due function runs right here.
  if (when <= Clock::now()) {
    fn();
  } else {
    timers_->Add(when, std::move(fn));
  }
}

v1::BeginRequest GrpcBackend::ToProto(const BeginCall& call) const {
  v1::BeginRequest r;
  r.set_namespace_(ns_);
  r.set_key(call.key);
  r.set_args_hash(call.args_hash);
  r.set_owner(call.owner);
  r.set_lease_ms(call.lease_ms);
  r.set_ttl_s(call.ttl_s);
  r.set_wait_ms(call.wait_ms);
  return r;
}

void GrpcBackend::Begin(int conn, const BeginCall& call,
                        Done<BeginAnswer> done) {
  if (!coalescers_.empty() && call.wait_ms == 0) {
    BeginBatchItem item{ns_,        call.key,      call.args_hash,
                        call.owner, call.lease_ms, call.ttl_s};
    coalescers_[conn]->BeginAsync(
        item, [done = std::move(done)](absl::StatusOr<v1::BeginResponse> r) {
          done(FromCoalesced<BeginAnswer>(
              r, [](const v1::BeginResponse& b) { return FromProto(b); }));
        });
    return;
  }
  auto c = NewCall<v1::BeginRequest, v1::BeginResponse>();
  c->request = ToProto(call);
  auto* raw = c.release();
  const CallTarget target = TargetOf(conn, call.key);
  target.stub->async()->Begin(
      &raw->context, &raw->request, &raw->response,
      [raw, target, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Call<v1::BeginRequest, v1::BeginResponse>> owned(raw);
        target.Observe(owned->context, status);
        if (!status.ok()) {
          BeginAnswer a;
          a.error = ErrorOf(status);
          done(a);
          return;
        }
        done(FromProto(owned->response));
      });
}

void GrpcBackend::Complete(int conn, const CompleteCall& call,
                           Done<FencedAnswer> done) {
  if (!coalescers_.empty()) {
    CompleteBatchItem item{ns_,         call.key,    call.fence,
                           v1::SUCCESS, call.result, call.ttl_s};
    coalescers_[conn]->CompleteAsync(
        item, [done = std::move(done)](absl::StatusOr<v1::CompleteResponse> r) {
          done(
              FromCoalesced<FencedAnswer>(r, [](const v1::CompleteResponse& c) {
                return FromProto(c.status(), c.fence());
              }));
        });
    return;
  }
  auto c = NewCall<v1::CompleteRequest, v1::CompleteResponse>();
  c->request.set_namespace_(ns_);
  c->request.set_key(call.key);
  c->request.set_fence(call.fence);
  c->request.set_outcome(v1::SUCCESS);
  c->request.set_result(call.result);
  c->request.set_ttl_s(call.ttl_s);
  auto* raw = c.release();
  const CallTarget target = TargetOf(conn, call.key);
  target.stub->async()->Complete(
      &raw->context, &raw->request, &raw->response,
      [raw, target, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Call<v1::CompleteRequest, v1::CompleteResponse>> owned(
            raw);
        target.Observe(owned->context, status);
        if (!status.ok()) {
          FencedAnswer a;
          a.error = ErrorOf(status);
          done(a);
          return;
        }
        done(FromProto(owned->response.status(), owned->response.fence()));
      });
}

void GrpcBackend::Release(int conn, const std::string& key, uint64_t fence,
                          Done<FencedAnswer> done) {
  auto c = NewCall<v1::ReleaseRequest, v1::ReleaseResponse>();
  c->request.set_namespace_(ns_);
  c->request.set_key(key);
  c->request.set_fence(fence);
  auto* raw = c.release();
  const CallTarget target = TargetOf(conn, key);
  target.stub->async()->Release(
      &raw->context, &raw->request, &raw->response,
      [raw, target, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Call<v1::ReleaseRequest, v1::ReleaseResponse>> owned(
            raw);
        target.Observe(owned->context, status);
        if (!status.ok()) {
          FencedAnswer a;
          a.error = ErrorOf(status);
          done(a);
          return;
        }
        // Release's status numbers match Complete's (OK, STALE_FENCE, ...).
        done(FromProto(
            static_cast<v1::CompleteResponse::Status>(owned->response.status()),
            owned->response.fence()));
      });
}

void GrpcBackend::BeginBatch(int conn, const std::vector<BeginCall>& calls,
                             Done<std::vector<BeginAnswer>> done) {
  if (routes_ == nullptr) {
    SendBeginBatch(FixedTarget(conn), calls, std::move(done));
    return;
  }
  const std::vector<BatchSlice> slices = SplitByGroup(
      calls.size(),
      [&](size_t i) { return routes_->GroupOf(conn, ns_, calls[i].key); });
  auto join = std::make_shared<SliceJoin<BeginAnswer>>(
      calls.size(), slices.size(), std::move(done));
  for (const BatchSlice& slice : slices) {
    SendBeginBatch(routes_->OfGroup(conn, slice.group), Pick(calls, slice),
                   [join, slice](std::vector<BeginAnswer> answers) {
                     join->Answer(slice, std::move(answers));
                   });
  }
}

void GrpcBackend::SendBeginBatch(const CallTarget& target,
                                 const std::vector<BeginCall>& calls,
                                 Done<std::vector<BeginAnswer>> done) {
  auto c = NewCall<v1::BeginBatchRequest, v1::BeginBatchResponse>();
  for (const BeginCall& call : calls) *c->request.add_items() = ToProto(call);
  auto* raw = c.release();
  target.stub->async()->BeginBatch(
      &raw->context, &raw->request, &raw->response,
      [raw, target, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Call<v1::BeginBatchRequest, v1::BeginBatchResponse>>
            owned(raw);
        target.Observe(owned->context, status);
        std::vector<BeginAnswer> answers;
        if (!status.ok()) {
          BeginAnswer a;
          a.error = ErrorOf(status);
          answers.push_back(a);
          done(std::move(answers));
          return;
        }
        for (const auto& item : owned->response.items()) {
          if (item.has_response()) {
            answers.push_back(FromProto(item.response()));
          } else {
            BeginAnswer a;
            a.error = "item error " + std::to_string(item.error().code()) +
                      ": " + item.error().message();
            answers.push_back(a);
          }
        }
        done(std::move(answers));
      });
}

void GrpcBackend::CompleteBatch(int conn,
                                const std::vector<CompleteCall>& calls,
                                Done<std::vector<FencedAnswer>> done) {
  if (routes_ == nullptr) {
    SendCompleteBatch(FixedTarget(conn), calls, std::move(done));
    return;
  }
  const std::vector<BatchSlice> slices = SplitByGroup(
      calls.size(),
      [&](size_t i) { return routes_->GroupOf(conn, ns_, calls[i].key); });
  auto join = std::make_shared<SliceJoin<FencedAnswer>>(
      calls.size(), slices.size(), std::move(done));
  for (const BatchSlice& slice : slices) {
    SendCompleteBatch(routes_->OfGroup(conn, slice.group), Pick(calls, slice),
                      [join, slice](std::vector<FencedAnswer> answers) {
                        join->Answer(slice, std::move(answers));
                      });
  }
}

void GrpcBackend::SendCompleteBatch(const CallTarget& target,
                                    const std::vector<CompleteCall>& calls,
                                    Done<std::vector<FencedAnswer>> done) {
  auto c = NewCall<v1::CompleteBatchRequest, v1::CompleteBatchResponse>();
  for (const CompleteCall& call : calls) {
    v1::CompleteRequest* r = c->request.add_items();
    r->set_namespace_(ns_);
    r->set_key(call.key);
    r->set_fence(call.fence);
    r->set_outcome(v1::SUCCESS);
    r->set_result(call.result);
    r->set_ttl_s(call.ttl_s);
  }
  auto* raw = c.release();
  target.stub->async()->CompleteBatch(
      &raw->context, &raw->request, &raw->response,
      [raw, target, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<
            Call<v1::CompleteBatchRequest, v1::CompleteBatchResponse>>
            owned(raw);
        target.Observe(owned->context, status);
        std::vector<FencedAnswer> answers;
        if (!status.ok()) {
          FencedAnswer a;
          a.error = ErrorOf(status);
          answers.push_back(a);
          done(std::move(answers));
          return;
        }
        for (const auto& item : owned->response.items()) {
          if (item.has_response()) {
            answers.push_back(
                FromProto(item.response().status(), item.response().fence()));
          } else {
            FencedAnswer a;
            a.error = "item error " + std::to_string(item.error().code()) +
                      ": " + item.error().message();
            answers.push_back(a);
          }
        }
        done(std::move(answers));
      });
}

void GrpcBackend::Echo(int conn, const std::string& payload,
                       Done<std::string> done) {
  auto c = NewCall<v1::EchoRequest, v1::EchoResponse>();
  c->request.set_payload(payload);
  auto* raw = c.release();
  bench_[conn]->async()->Echo(
      &raw->context, &raw->request, &raw->response,
      [raw, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Call<v1::EchoRequest, v1::EchoResponse>> owned(raw);
        done(status.ok() ? std::string() : ErrorOf(status));
      });
}

void GrpcBackend::SetNx(int conn, const std::vector<std::string>& keys,
                        uint32_t ttl_s, Done<std::string> done) {
  done("dedup has no SET NX primitive (use the batch workload)");
}

}  // namespace dedup::bench
