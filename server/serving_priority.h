// Inside a node, consensus runs before request handling: the threads gRPC
// runs calls on are given a lower scheduling priority (a higher nice value)
// the first time each serves a call. When the node's CPU runs short (a
// container's quota, a busy machine), its Raft loops, relays and disk
// threads then still run on time, so its leaders keep leadership and
// requests wait in queues instead; with equal priorities a flood of calls
// could keep a leader's loop off the CPU past its election timeout.
//
// Raising a thread's nice value needs no privilege, which raising the Raft
// threads' priority would (CAP_SYS_NICE). Threads gRPC starts from a
// lowered thread inherit its nice value.
#ifndef DEDUP_SERVER_SERVING_PRIORITY_H_
#define DEDUP_SERVER_SERVING_PRIORITY_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace dedup {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators: on each
// call, lowers the calling thread to `nice` (1..19) once, then adds no
// interceptor to the call. nice <= 0: returns null (priorities untouched).
// A refusal by the kernel is logged once and not retried. Thread-safe.
[[nodiscard]] std::unique_ptr<
    grpc::experimental::ServerInterceptorFactoryInterface>
ServingPriorityInterceptor(int nice);

// Sets the calling thread's nice value (Linux: per thread). 0, or the
// errno of setpriority.
[[nodiscard]] int SetThisThreadNice(int nice);

}  // namespace dedup

#endif  // DEDUP_SERVER_SERVING_PRIORITY_H_
