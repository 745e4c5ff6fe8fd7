// How dedupd's gRPC server protects itself from clients that hold resources
// without using them: streams per connection, idle and half-open
// connections, handshakes that never finish, pings, file descriptors.
#ifndef DEDUP_SERVER_TRANSPORT_LIMITS_H_
#define DEDUP_SERVER_TRANSPORT_LIMITS_H_

#include <cstdint>
#include <string>

#include "grpcpp/server_builder.h"

namespace dedup {

struct TransportLimits {
  // Calls in flight on one connection; more wait for a slot (HTTP/2).
  int max_concurrent_streams = 1000;
  // A connection with no call for this long is closed (GOAWAY; clients
  // reconnect when they next call).
  int64_t max_connection_idle_ms = 5 * 60 * 1000;
  // A connection that has not finished its TLS/HTTP2 handshake by then is
  // closed: a silent TCP connection holds a descriptor only this long.
  int64_t handshake_timeout_ms = 10'000;
  // The server pings a connection silent for this long and closes it when
  // no answer comes within the timeout (a peer that vanished).
  int64_t keepalive_time_ms = 60'000;
  int64_t keepalive_timeout_ms = 20'000;
  // Clients may ping at most this often; faster pingers are disconnected.
  int64_t min_client_ping_interval_ms = 10'000;
};

// Sets `limits` on `builder` as channel arguments.
void ApplyTransportLimits(const TransportLimits& limits,
                          grpc::ServerBuilder* builder);

// Raises the soft limit on open files to the hard limit, so idle
// connections run out of it later than they otherwise would (and RocksDB's
// files keep room). Returns a line for the log saying what it did.
std::string RaiseOpenFileLimit();

}  // namespace dedup

#endif  // DEDUP_SERVER_TRANSPORT_LIMITS_H_
