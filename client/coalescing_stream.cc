// CoalescingLane's Session path (client/coalescing_lane.h): a call as one
// operation on its leader's stream, its answer read as a batch RPC's.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "client/coalescing_lane.h"

namespace dedup {
namespace {

constexpr char kOutcomeUnknown[] = "OUTCOME_UNKNOWN";

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
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
    Settle(batch, AttemptReply{ToGrpcStatus(answer.status()), "", false});
    return;
  }
  batch->response.Clear();
  auto* item = batch->response.add_items();
  AttemptReply reply;
  if (answer->has_error()) {
    const v1::ItemError& error = answer->error();
    const auto code = static_cast<grpc::StatusCode>(error.code());
    if (code == grpc::StatusCode::UNAVAILABLE && !error.leader().empty()) {
      reply = AttemptReply{grpc::Status(code, error.message()), error.leader()};
    } else if (code == grpc::StatusCode::ABORTED &&
               error.reason() == kOutcomeUnknown) {
      reply = AttemptReply{grpc::Status(code, error.message()), "", true};
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
