#include "server/proto_convert.h"

#include <optional>
#include <string>

#include "dedup/v1/error_details.pb.h"
#include "server/tenant_limiter.h"

namespace dedup {
namespace {

v1::BeginResponse::Status ToProto(BeginStatus status) {
  switch (status) {
    case BeginStatus::kStarted:
      return v1::BeginResponse::STARTED;
    case BeginStatus::kInUse:
      return v1::BeginResponse::IN_USE;
    case BeginStatus::kConflict:
      return v1::BeginResponse::CONFLICT;
    case BeginStatus::kDuplicate:
      return v1::BeginResponse::DUPLICATE;
    case BeginStatus::kExpired:
      return v1::BeginResponse::EXPIRED;
  }
  return v1::BeginResponse::STATUS_UNSPECIFIED;
}

void FillCheckpoint(const Record& r, v1::CheckpointInfo* out) {
  out->set_step(r.checkpoint_step);
  out->set_data(r.checkpoint_data);
  out->set_fence(r.checkpoint_fence);
  out->set_recorded_at(r.checkpoint_at_ms);
}

// The three fenced responses share their status numbering on purpose.
template <typename Status>
Status FencedToProto(FencedStatus status) {
  switch (status) {
    case FencedStatus::kOk:
      return Status(1);
    case FencedStatus::kStaleFence:
      return Status(2);
    case FencedStatus::kNotFound:
      return Status(3);
    case FencedStatus::kAlreadyCompleted:
      return Status(4);
  }
  return Status(0);
}
static_assert(v1::CompleteResponse::OK == 1 &&
              v1::CompleteResponse::STALE_FENCE == 2 &&
              v1::CompleteResponse::NOT_FOUND == 3 &&
              v1::CompleteResponse::ALREADY_COMPLETED == 4);
static_assert(v1::ReleaseResponse::OK == 1 &&
              v1::ReleaseResponse::STALE_FENCE == 2 &&
              v1::ReleaseResponse::NOT_FOUND == 3 &&
              v1::ReleaseResponse::ALREADY_COMPLETED == 4);
static_assert(v1::RenewResponse::OK == 1 &&
              v1::RenewResponse::STALE_FENCE == 2 &&
              v1::RenewResponse::NOT_FOUND == 3 &&
              v1::RenewResponse::ALREADY_COMPLETED == 4);
static_assert(v1::CheckpointResponse::OK == 1 &&
              v1::CheckpointResponse::STALE_FENCE == 2 &&
              v1::CheckpointResponse::NOT_FOUND == 3 &&
              v1::CheckpointResponse::ALREADY_COMPLETED == 4);

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  if (const std::optional<uint32_t> delay = RetryDelayMs(status)) {
    const int64_t retry_ms = *delay;
    // grpc-status-details-bin: a google.rpc.Status carrying a RetryInfo.
    v1::RpcStatus details;
    details.set_code(static_cast<int>(status.code()));
    details.set_message(std::string(status.message()));
    v1::RetryInfo retry;
    retry.mutable_retry_delay()->set_seconds(retry_ms / 1000);
    retry.mutable_retry_delay()->set_nanos(
        static_cast<int32_t>(retry_ms % 1000) * 1'000'000);
    google::protobuf::Any* any = details.add_details();
    any->set_type_url("type.googleapis.com/google.rpc.RetryInfo");
    any->set_value(retry.SerializeAsString());
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()),
                        details.SerializeAsString());
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

Outcome FromProto(v1::Outcome outcome) {
  switch (outcome) {
    case v1::SUCCESS:
      return Outcome::kSuccess;
    case v1::ERROR:
      return Outcome::kError;
    default:
      return Outcome::kNone;
  }
}

v1::Outcome ToProto(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return v1::SUCCESS;
    case Outcome::kError:
      return v1::ERROR;
    case Outcome::kNone:
      break;
  }
  return v1::OUTCOME_UNSPECIFIED;
}

void FillBeginResponse(const BeginResult& result, v1::BeginResponse* out) {
  const BeginDecision& d = result.decision;
  const Record& r = d.record;
  out->set_status(ToProto(d.status));
  out->set_fence(r.fence);
  out->set_takeover(d.takeover);
  out->set_created_at(r.created_at_ms);
  out->set_expires_at(r.expire_at_ms);
  out->set_attempts(r.attempts);
  switch (d.status) {
    case BeginStatus::kStarted:
      out->set_lease_expires_at(r.lease_until_ms);
      out->set_rerun(d.rerun);
      if (r.has_checkpoint()) FillCheckpoint(r, out->mutable_checkpoint());
      break;
    case BeginStatus::kExpired:
      out->set_outcome(ToProto(r.outcome));
      out->set_completed_at(r.completed_at_ms);
      out->set_tombstone_expires_at(r.retain_until_ms);
      break;
    case BeginStatus::kInUse:
      out->set_lease_expires_at(r.lease_until_ms);
      out->set_retry_after_ms(static_cast<uint32_t>(d.retry_after_ms));
      break;
    case BeginStatus::kDuplicate:
      out->set_outcome(ToProto(r.outcome));
      out->set_result(r.result);
      out->set_completed_at(r.completed_at_ms);
      break;
    case BeginStatus::kConflict:
      break;
  }
}

void FillCompleteResponse(const FencedDecision& d, v1::CompleteResponse* out) {
  out->set_status(FencedToProto<v1::CompleteResponse::Status>(d.status));
  if (d.status == FencedStatus::kNotFound) return;
  out->set_fence(d.record.fence);
  if (d.status == FencedStatus::kOk ||
      d.status == FencedStatus::kAlreadyCompleted) {
    out->set_expires_at(d.record.expire_at_ms);
  }
}

void FillReleaseResponse(const FencedDecision& d, v1::ReleaseResponse* out) {
  out->set_status(FencedToProto<v1::ReleaseResponse::Status>(d.status));
  if (d.status != FencedStatus::kNotFound) out->set_fence(d.record.fence);
}

void FillRenewResponse(const FencedDecision& d, v1::RenewResponse* out) {
  out->set_status(FencedToProto<v1::RenewResponse::Status>(d.status));
  if (d.status == FencedStatus::kNotFound) return;
  out->set_fence(d.record.fence);
  if (d.status == FencedStatus::kOk) {
    out->set_lease_expires_at(d.record.lease_until_ms);
    out->set_expires_at(d.record.expire_at_ms);
  }
}

void FillCheckpointResponse(const FencedDecision& d,
                            v1::CheckpointResponse* out) {
  out->set_status(FencedToProto<v1::CheckpointResponse::Status>(d.status));
  if (d.status == FencedStatus::kNotFound) return;
  out->set_fence(d.record.fence);
  if (d.status == FencedStatus::kOk) {
    out->set_lease_expires_at(d.record.lease_until_ms);
  }
}

void FillRecord(const Record& r, v1::Record* out) {
  out->set_state(r.state == RecordState::kCompleted ? v1::COMPLETED
                                                    : v1::IN_FLIGHT);
  out->set_fence(r.fence);
  out->set_args_hash(r.args_hash);
  out->set_owner(r.owner);
  out->set_outcome(ToProto(r.outcome));
  out->set_result(r.result);
  out->set_created_at(r.created_at_ms);
  out->set_completed_at(r.completed_at_ms);
  out->set_expires_at(r.expire_at_ms);
  if (r.state == RecordState::kInFlight) {
    out->set_lease_expires_at(r.lease_until_ms);
    if (r.has_checkpoint()) FillCheckpoint(r, out->mutable_checkpoint());
  }
  out->set_attempts(r.attempts);
}

}  // namespace dedup
