// Blocking Cluster calls from one node to another (moving a replica,
// checking a removal): the group's leader as the other nodes report it.
#ifndef DEDUP_SERVER_CLUSTER_SERVICE_PEERS_H_
#define DEDUP_SERVER_CLUSTER_SERVICE_PEERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel_security.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace dedup {

// A node's client address and id.
struct NodeAt {
  uint64_t id = 0;
  std::string address;
};

// The gRPC outcome of a call as an absl::Status, the "dedup-leader"
// trailer (a follower's hint) kept as kLeaderAddressPayload.
[[nodiscard]] absl::Status FromCall(const grpc::Status& status,
                                    const grpc::ClientContext& context);

// One unary Cluster call to `address` within `timeout`. Blocks.
template <typename Request, typename Response, typename Method>
[[nodiscard]] absl::Status CallPeer(const ChannelFactory& open,
                                    const std::string& address, Method method,
                                    const Request& request, Response* response,
                                    absl::Duration timeout) {
  auto stub = v1::Cluster::NewStub(open(address));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::Status status = ((*stub).*method)(&context, request, response);
  return FromCall(status, context);
}

// The leader of `group_id`'s status, asked of `candidates` (then of the
// leader they name) until one answers as leader or `timeout` passes.
// UNAVAILABLE when none did. Blocks.
[[nodiscard]] absl::StatusOr<v1::ClusterStatusResponse> FindGroupLeader(
    const ChannelFactory& open, const std::vector<NodeAt>& candidates,
    uint32_t group_id, absl::Duration timeout);

// The role ("voter", "standby", "spare") of `node` in `status`'s members,
// "" when it is not a member.
[[nodiscard]] std::string RoleOf(const v1::ClusterStatusResponse& status,
                                 uint64_t node);
// The voters among `status`'s members.
[[nodiscard]] std::vector<uint64_t> VotersOf(
    const v1::ClusterStatusResponse& status);

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_SERVICE_PEERS_H_
