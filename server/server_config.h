// dedupd's configuration, read from command-line flags (see --help).
#ifndef DEDUP_SERVER_SERVER_CONFIG_H_
#define DEDUP_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/log.h"
#include "server/event_log.h"
#include "server/limits.h"
#include "server/transport_limits.h"
#include "storage/store.h"

namespace dedup {

struct ServerConfig {
  std::string address;
  // host:port of the Prometheus /metrics endpoint; empty disables it.
  std::string metrics_address;
  // Empty: /metrics needs no credential.
  std::string metrics_token_file;
  // host:port of the plaintext health-only listener; empty: none.
  std::string health_address;
  // --ready_file: where the ready file goes (server/ready_file.h); empty:
  // none.
  std::string ready_file;
  // Namespaces counted under their own label value (the rest as "other").
  std::vector<std::string> metrics_namespaces;
  EventLogOptions event_log;
  StoreOptions store;
  Limits limits;
  // --policy_file: per-namespace defaults and limits (namespace_policy.h).
  std::string policy_file;
  int64_t shutdown_grace_ms = 10'000;
  // Part of the grace during which new calls get UNAVAILABLE.
  int64_t lame_duck_ms = 250;
  bool enable_bench_service = false;
  // --serving_thread_nice: the nice value of the threads gRPC runs calls
  // on (serving_priority.h); 0 leaves them as started.
  int serving_thread_nice = 10;
  TransportLimits transport;
  // --log_level: lines below it are not written (common/log.h).
  LogLevel log_level = LogLevel::kInfo;
  // --log_format: JSON lines or text (common/log.h).
  LogFormat log_format = LogFormat::kJson;
};

// Applies --log_format at once (after the flags are parsed), so that errors
// in the other flags are written in it too. An unknown format is left as it
// was, for ServerConfigFromFlags to refuse.
void ApplyLogFormatFlag();

// Reads the flags after absl::ParseCommandLine. Fails with INVALID_ARGUMENT
// naming the flag when a value is malformed or incoherent.
[[nodiscard]] absl::StatusOr<ServerConfig> ServerConfigFromFlags();

}  // namespace dedup

#endif  // DEDUP_SERVER_SERVER_CONFIG_H_
