// How soon a client channel reconnects to a dedupd that went away.
//
// gRPC's own reconnect backoff grows from 1 s to 120 s and fails calls at
// once meanwhile, so a client whose server restarted kept failing for
// seconds after it listened again, the longer the outage the longer
// (docs/decisions.md). With the values below, attempts start 100 ms apart
// and are never more than 1 s apart; a refused attempt costs a SYN.
//
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone on purpose: despite its
// name, gRPC core reads it as the least time a connection attempt is given
// (20 s by default; an attempt's deadline is the later of that and the next
// backoff time). A small value there would cut off, after about 1 s at
// most, any connect plus TLS handshake slower than that, e.g. a server busy
// with the handshakes of all its clients at once after a restart, which
// would then never connect.
#ifndef DEDUP_COMMON_RECONNECT_BACKOFF_H_
#define DEDUP_COMMON_RECONNECT_BACKOFF_H_

#include "grpcpp/support/channel_arguments.h"

namespace dedup {

inline constexpr int kInitialReconnectBackoffMs = 100;
inline constexpr int kMaxReconnectBackoffMs = 1000;

// Sets GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS and
// GRPC_ARG_MAX_RECONNECT_BACKOFF_MS on `args` to the values above, each
// unless `args` already has it (what a caller set explicitly wins). For
// every channel the client opens itself; a caller's own channel or
// ChannelFactory is used as it is.
void SetReconnectBackoff(grpc::ChannelArguments& args);

}  // namespace dedup

#endif  // DEDUP_COMMON_RECONNECT_BACKOFF_H_
