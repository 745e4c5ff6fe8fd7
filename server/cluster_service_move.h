// Cluster.MoveReplica's steps (see cluster.proto): moves a group's replica
// from one node to another through the group's current leader, each step
// checking first what is already done, so a move run again resumes.
#ifndef DEDUP_SERVER_CLUSTER_SERVICE_MOVE_H_
#define DEDUP_SERVER_CLUSTER_SERVICE_MOVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel_security.h"
#include "dedup/v1/cluster.pb.h"
#include "server/group_directory.h"
#include "server/shard_map_publish.h"

namespace dedup {

struct MoveLimits {
  // Finding the leader, and each quick step (host, transfer, remove, drop).
  absl::Duration step = absl::Seconds(30);
  // Adding the new replica: as long as copying the group's state takes.
  absl::Duration catch_up = absl::Minutes(30);
};

// Runs a move, blocking the calling thread (never a gRPC callback thread)
// until it is done or a step failed. Every step is a Cluster call over
// `open`'s channels (the node's own peer credentials, an operator's), to the
// node concerned or the group's leader; `directory` (not owned) names the
// nodes. Each membership step writes the group's new replicas into the
// shard map (the AddNode / RemoveNode handlers do, on the group's leader);
// the move ends by writing them itself through `publisher` (not owned; null:
// not written), so a move that resumes after a failed write still updates
// the map. Errors as cluster.proto's MoveReplica says.
[[nodiscard]] absl::StatusOr<v1::MoveReplicaResponse> MoveReplica(
    const GroupDirectory& directory, const ChannelFactory& open,
    const ShardMapPublisher* publisher, const v1::MoveReplicaRequest& request,
    const MoveLimits& limits = {});

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_SERVICE_MOVE_H_
