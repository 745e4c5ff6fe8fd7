// Requests gRPC cannot parse into their message (malformed protobuf, or a
// string field that is not valid UTF-8) are refused before any handler runs:
// gRPC 1.51 answers them UNIMPLEMENTED with an empty message, and protobuf
// logs an ERROR line for each. Clients then cannot tell what is wrong, and a
// flood of them fills the log.
//
// The interceptor here rewrites that answer as INVALID_ARGUMENT "request:
// cannot be parsed as ..." and counts it in
// dedup_invalid_requests_total{field="request"}; QuietProtobufParseErrors
// turns protobuf's log lines into at most one line per minute.
#ifndef DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_
#define DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"
#include "server/metrics.h"

namespace dedup {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. Does not
// own `metrics`, which must outlive the server. Our handlers never answer
// UNIMPLEMENTED, so on a dedup.v1 method that code means "not parsed".
[[nodiscard]] std::unique_ptr<
    grpc::experimental::ServerInterceptorFactoryInterface>
UnparseableRequestInterceptor(Metrics* metrics);

// Installs protobuf's log handler: lines are written at most once a minute
// (with the count of those held back). Call once, before serving.
void QuietProtobufParseErrors();

}  // namespace dedup

#endif  // DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_
