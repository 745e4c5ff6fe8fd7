// What a node in cluster mode knows of the cluster's groups: the layout
// (which group owns which slots, and its replicas), the client addresses of
// the nodes, the stores of the groups it hosts, and the best leader hint
// for every group. Shared by the Cluster service (ShardMap, group_id), the
// GroupRouter's refusals and the daemon's leader balancing.
#ifndef DEDUP_SERVER_GROUP_DIRECTORY_H_
#define DEDUP_SERVER_GROUP_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "replication/replicated_store.h"
#include "replication/shard_layout.h"

namespace dedup {

// Immutable after construction; every method may be called from any
// thread (the hosted stores' GetClusterStatus is thread-safe).
class GroupDirectory {
 public:
  struct Leader {
    uint64_t id = 0;      // 0: none known
    std::string address;  // client address; empty when not known
  };

  // `hosted` maps group ids to this node's replicas (not owned: they must
  // outlive the directory); `peers` gives the nodes' client addresses.
  GroupDirectory(uint64_t node_id, ShardLayout layout,
                 std::vector<ClusterNode> peers,
                 std::map<uint32_t, ReplicatedStore*> hosted);

  uint64_t node_id() const { return node_id_; }
  const ShardLayout& layout() const { return layout_; }
  const std::map<uint32_t, ReplicatedStore*>& hosted() const { return hosted_; }
  // This node's replica of `group_id`, or null.
  ReplicatedStore* Hosted(uint32_t group_id) const;
  // NOT_FOUND "this node hosts no replica of group G" unless hosted.
  absl::StatusOr<ReplicatedStore*> HostedOrNotFound(uint32_t group_id) const;
  // The client address of `node` from --peers (or a hosted group's
  // configuration), empty when unknown.
  std::string ClientAddress(uint64_t node) const;
  // A hosted group: its live leader (none during an election). Any other:
  // the group's preferred leader (its first replica), which leader
  // balancing makes the leader whenever it is up.
  Leader LeaderOf(uint32_t group_id) const;
  // The refusal of an operation on a group not hosted here: UNAVAILABLE
  // naming the node and the group, with kLeaderAddressPayload = LeaderOf's
  // address when known.
  absl::Status NotHosted(uint32_t group_id) const;

 private:
  const uint64_t node_id_;
  const ShardLayout layout_;
  const std::vector<ClusterNode> peers_;
  const std::map<uint32_t, ReplicatedStore*> hosted_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_GROUP_DIRECTORY_H_
