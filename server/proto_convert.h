// Translation between the storage layer's plain types and dedup.v1 messages.
// The only place that knows both; storage/ stays free of protobuf.
#ifndef DEDUP_SERVER_PROTO_CONVERT_H_
#define DEDUP_SERVER_PROTO_CONVERT_H_

#include "absl/status/status.h"
#include "dedup/v1/dedup.pb.h"
#include "grpcpp/support/status.h"
#include "storage/authority.h"
#include "storage/record.h"
#include "storage/store.h"

namespace dedup {

// Same code, same message.
[[nodiscard]] grpc::Status ToGrpcStatus(const absl::Status& status);

[[nodiscard]] Outcome FromProto(v1::Outcome outcome);
[[nodiscard]] v1::Outcome ToProto(Outcome outcome);

void FillBeginResponse(const BeginResult& result, v1::BeginResponse* out);
void FillCompleteResponse(const FencedDecision& d, v1::CompleteResponse* out);
void FillReleaseResponse(const FencedDecision& d, v1::ReleaseResponse* out);
void FillRenewResponse(const FencedDecision& d, v1::RenewResponse* out);
void FillCheckpointResponse(const FencedDecision& d,
                            v1::CheckpointResponse* out);
void FillRecord(const Record& record, v1::Record* out);

}  // namespace dedup

#endif  // DEDUP_SERVER_PROTO_CONVERT_H_
