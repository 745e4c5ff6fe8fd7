// CoalescingLane's Session path (client/coalescing_lane.h): a call as one
// operation on its leader's stream, its answer read as a batch RPC's.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/coalescing_lane.h"
#include "dedup/v1/error_details.pb.h"

namespace dedup {
namespace {

constexpr char kOutcomeUnknown[] = "OUTCOME_UNKNOWN";

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// The delay an over-limit ItemError asks for: retry_after_ms, or from a
// server older than that field the message's "; retry in N ms" ending.
std::optional<int64_t> RetryAfterMs(const v1::ItemError& error) {
  if (error.retry_after_ms() > 0) return error.retry_after_ms();
  absl::string_view message = error.message();
  const size_t at = message.rfind("retry in ");
  int64_t ms = 0;
  if (at == absl::string_view::npos ||
      !absl::SimpleAtoi(absl::StripSuffix(message.substr(at + 9), " ms"),
                        &ms)) {
    return std::nullopt;
  }
  return ms;
}

// A tenant over its limits: a unary call gets RESOURCE_EXHAUSTED with a
// RetryInfo, an operation of a stream an ItemError with the delay. The
// status a unary call would have got, so the retry rule waits as it would;
// nullopt when the error names no delay.
std::optional<grpc::Status> OverLimitStatus(const v1::ItemError& error) {
  const std::optional<int64_t> retry_ms = RetryAfterMs(error);
  if (!retry_ms.has_value()) return std::nullopt;
  const int64_t ms = *retry_ms;
  v1::RetryInfo retry;
  retry.mutable_retry_delay()->set_seconds(ms / 1000);
  retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(ms % 1000) *
                                         1000000);
  v1::RpcStatus details;
  details.set_code(error.code());
  details.set_message(error.message());
  google::protobuf::Any* any = details.add_details();
  any->set_type_url("type.googleapis.com/google.rpc.RetryInfo");
  any->set_value(retry.SerializeAsString());
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, error.message(),
                      details.SerializeAsString());
}

// The reply a unary call would have ended with, for the refusals the retry
// rule acts on as it does for a call's (a follower naming the leader, an
// unknown outcome, a tenant over its limits); nullopt for the others, which
// are the item's answer.
std::optional<AttemptReply> AsCallReply(const v1::ItemError& error) {
  const auto code = static_cast<grpc::StatusCode>(error.code());
  if (code == grpc::StatusCode::UNAVAILABLE && !error.leader().empty()) {
    return AttemptReply{grpc::Status(code, error.message()), error.leader(),
                        false};
  }
  if (code == grpc::StatusCode::ABORTED && error.reason() == kOutcomeUnknown) {
    return AttemptReply{grpc::Status(code, error.message()), "", true};
  }
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    if (std::optional<grpc::Status> status = OverLimitStatus(error)) {
      return AttemptReply{*std::move(status), "", false};
    }
  }
  return std::nullopt;
}

}  // namespace

template <typename Traits>
void CoalescingLane<Traits>::SendOnStream(Batch* batch) {
  v1::SessionOp op;
  // The server answers DEADLINE_EXCEEDED when the attempt's deadline passed,
  // as a unary call's deadline would end it.
  const int64_t left = absl::ToInt64Milliseconds(batch->deadline - absl::Now());
  op.set_timeout_ms(
      static_cast<uint32_t>(std::clamp<int64_t>(left, 1, int64_t{UINT32_MAX})));
  *Traits::MutableOp(op) = batch->request.items(0);
  sessions_.For(batch->endpoint)
      .Submit(std::move(op),
              [this, batch](absl::StatusOr<v1::SessionAnswer> answer) {
                OnStreamAnswer(batch, std::move(answer));
              });
}

template <typename Traits>
void CoalescingLane<Traits>::OnStreamAnswer(
    Batch* batch, absl::StatusOr<v1::SessionAnswer> answer) {
  if (!answer.ok()) {
    // No Session there (nothing happened): the pool is off, and the call
    // goes as a batch RPC.
    if (sessions_.NoteMissing(answer.status())) {
      SendAsBatch(batch);
      return;
    }
    if (absl::IsResourceExhausted(answer.status())) {
      // A message limit ended the stream (say, an answer frame holding
      // several large results): the call goes again alone as a batch RPC,
      // as the items of a batch too large do (an owner makes a re-sent
      // Begin re-enter).
      batch->stream = false;
      Send(batch, /*new_attempt=*/false);
      return;
    }
    Settle(batch, AttemptReply{ToGrpcStatus(answer.status()), "", false});
    return;
  }
  batch->response.Clear();
  auto* item = batch->response.add_items();
  AttemptReply reply;
  if (answer->has_error()) {
    if (std::optional<AttemptReply> call = AsCallReply(answer->error())) {
      reply = *std::move(call);
      if (!reply.leader.empty()) {
        shards_.ObserveRedirect(batch->route, *batch->endpoint, reply.leader);
      }
    } else {
      *item->mutable_error() = std::move(*answer->mutable_error());
    }
  } else if (!Traits::TakeAnswer(*answer, item->mutable_response())) {
    item->mutable_error()->set_code(
        static_cast<int32_t>(grpc::StatusCode::INTERNAL));
    item->mutable_error()->set_message(
        "session: the server answered an operation of another kind");
  }
  Settle(batch, reply);
}

template void CoalescingLane<BeginLaneTraits>::SendOnStream(Batch*);
template void CoalescingLane<BeginLaneTraits>::OnStreamAnswer(
    Batch*, absl::StatusOr<v1::SessionAnswer>);
template void CoalescingLane<CompleteLaneTraits>::SendOnStream(Batch*);
template void CoalescingLane<CompleteLaneTraits>::OnStreamAnswer(
    Batch*, absl::StatusOr<v1::SessionAnswer>);
template void CoalescingLane<CheckpointLaneTraits>::SendOnStream(Batch*);
template void CoalescingLane<CheckpointLaneTraits>::OnStreamAnswer(
    Batch*, absl::StatusOr<v1::SessionAnswer>);

}  // namespace dedup
