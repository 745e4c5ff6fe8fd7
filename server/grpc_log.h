// gRPC's own log lines (gpr_log: its errors, and GRPC_TRACE output), in
// dedupd's log with component "grpc" instead of gRPC's own stderr format, so
// that every line on stderr has one format.
#ifndef DEDUP_SERVER_GRPC_LOG_H_
#define DEDUP_SERVER_GRPC_LOG_H_

namespace dedup {

// Installs the route for the whole process. Call once, early in main(),
// before gRPC is used. gRPC's verbosity (GRPC_VERBOSITY, default error) still
// decides which lines reach it.
void RouteGrpcLogs();

}  // namespace dedup

#endif  // DEDUP_SERVER_GRPC_LOG_H_
