#include "client/retry_delay.h"

#include <algorithm>

#include "dedup/v1/error_details.pb.h"

namespace dedup {

std::optional<absl::Duration> ServerRetryDelay(const grpc::Status& status,
                                               absl::Duration cap) {
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED ||
      status.error_details().empty()) {
    return std::nullopt;
  }
  v1::RpcStatus details;
  if (!details.ParseFromString(status.error_details())) return std::nullopt;
  for (const google::protobuf::Any& any : details.details()) {
    if (any.type_url() != "type.googleapis.com/google.rpc.RetryInfo") continue;
    v1::RetryInfo retry;
    if (!retry.ParseFromString(any.value())) return std::nullopt;
    const absl::Duration delay = absl::Seconds(retry.retry_delay().seconds()) +
                                 absl::Nanoseconds(retry.retry_delay().nanos());
    return std::clamp(delay, absl::ZeroDuration(), cap);
  }
  return std::nullopt;
}

}  // namespace dedup
