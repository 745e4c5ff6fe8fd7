#include "server/transport_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpc/impl/codegen/grpc_types.h"

namespace dedup {

void ApplyTransportLimits(const TransportLimits& limits,
                          grpc::ServerBuilder* builder) {
  auto set = [builder](const char* name, int64_t value) {
    builder->AddChannelArgument(name, static_cast<int>(value));
  };
  set(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  set(GRPC_ARG_MAX_CONNECTION_IDLE_MS, limits.max_connection_idle_ms);
  set(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, limits.handshake_timeout_ms);
  set(GRPC_ARG_KEEPALIVE_TIME_MS, limits.keepalive_time_ms);
  set(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, limits.keepalive_timeout_ms);
  // Clients' keepalive pings are welcome (they keep NATs open), but not
  // faster than this, and not a flood: two strikes and the connection goes.
  set(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  set(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      limits.min_client_ping_interval_ms);
  set(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
}

std::string RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::StrCat("open files: getrlimit: ", std::strerror(errno));
  }
  if (limit.rlim_cur >= limit.rlim_max) {
    return absl::StrCat("open files: limit ", limit.rlim_cur);
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::StrCat("open files: limit ", before,
                        " (raising it failed: ", std::strerror(errno), ")");
  }
  return absl::StrCat("open files: limit raised from ", before, " to ",
                      limit.rlim_cur);
}

}  // namespace dedup
