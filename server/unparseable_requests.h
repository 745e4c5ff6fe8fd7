// Requests gRPC cannot parse into their message (malformed protobuf, or a
// string field that is not valid UTF-8) are refused before any handler runs:
// gRPC 1.51 answers them UNIMPLEMENTED with an empty message, and protobuf
// logs an ERROR line for each. Clients then cannot tell what is wrong, and a
// flood of them fills the log.
//
// The interceptor here rewrites that answer as INVALID_ARGUMENT "request:
// cannot be parsed as ..." and counts it in
// dedup_invalid_requests_total{field="request"}; QuietProtobufParseErrors
// turns protobuf's log lines into at most one line per minute. A dedup.v1
// service this node does not serve (Cluster on a single node, Bench unless
// --enable_bench_service) stays UNIMPLEMENTED, with a message saying why.
#ifndef DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_
#define DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics.h"

namespace dedup {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. Does not
// own `metrics`, which must outlive the server. `served`: the full names of
// the services registered on the server ("dedup.v1.Dedup"). Our handlers
// never answer UNIMPLEMENTED, so on a method of a served dedup.v1 service
// that code means "not parsed".
[[nodiscard]] std::unique_ptr<
    grpc::experimental::ServerInterceptorFactoryInterface>
UnparseableRequestInterceptor(Metrics* metrics,
                              std::vector<std::string> served);

// The message of the UNIMPLEMENTED answer to a method of `service`, a
// dedup.v1 service this node does not serve ("this node is not in cluster
// mode" for dedup.v1.Cluster).
[[nodiscard]] std::string NotServedMessage(absl::string_view service);

// Installs protobuf's log handler: lines are written at most once a minute
// (with the count of those held back). Call once, before serving.
void QuietProtobufParseErrors();

}  // namespace dedup

#endif  // DEDUP_SERVER_UNPARSEABLE_REQUESTS_H_
