// dedup.v1.Bench: Echo, the "bare gRPC" baseline. Served only with
// --enable_bench_service. It answers on the same callback threads as the
// Dedup service but never touches storage, so benchmarks can subtract the
// cost of gRPC itself.
#ifndef DEDUP_SERVER_BENCH_SERVICE_H_
#define DEDUP_SERVER_BENCH_SERVICE_H_

#include "dedup/v1/bench.grpc.pb.h"

namespace dedup {

// Thread-safe and stateless.
class BenchService final : public v1::Bench::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const v1::EchoRequest* request,
                                 v1::EchoResponse* response) override {
    response->set_payload(request->payload());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace dedup

#endif  // DEDUP_SERVER_BENCH_SERVICE_H_
