// The server's "retry after" on a refusal: RESOURCE_EXHAUSTED with a
// google.rpc.RetryInfo in the status details (proto/dedup/v1/
// error_details.proto), sent when a tenant is over its limits. Clients wait
// that long and try again, as an attempt like any other.
#ifndef DEDUP_CLIENT_RETRY_DELAY_H_
#define DEDUP_CLIENT_RETRY_DELAY_H_

#include <optional>

#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace dedup {

// The delay a RESOURCE_EXHAUSTED `status` asks for, or nullopt (another
// code, or no RetryInfo). Capped at `cap`, so a wrong server cannot park a
// client for hours.
[[nodiscard]] std::optional<absl::Duration> ServerRetryDelay(
    const grpc::Status& status, absl::Duration cap = absl::Seconds(30));

}  // namespace dedup

#endif  // DEDUP_CLIENT_RETRY_DELAY_H_
