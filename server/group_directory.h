// What a node in cluster mode knows of the cluster's groups: the layout
// (which group owns which slots, and its founding replicas), the client
// addresses of the nodes, the stores of the groups it hosts, and the best
// leader and replica hints for every group. Shared by the Cluster service
// (ShardMap, group_id), the GroupRouter's refusals and the daemon's leader
// balancing.
//
// The hosted groups change at run time (a replica moved in with Host, out
// with Unhost). The shard map served (CurrentView) is the one the meta
// group (group 0) stores, once this node has adopted a copy of it (Adopt,
// fed by ShardMapWatch): every node serves the same epoch and replicas for
// it. Before that it is the founding layout. A group's replicas for routing
// (ReplicasOf) come from the group's Raft configuration when hosted here,
// else from the hint left when this node stopped hosting it (until a newer
// map arrives), else from the adopted map, else from the layout.
#ifndef DEDUP_SERVER_GROUP_DIRECTORY_H_
#define DEDUP_SERVER_GROUP_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "replication/replicated_store.h"
#include "replication/shard_layout.h"

namespace dedup {

// Thread-safe: every method may be called from any thread. The hosted map
// and the hints are guarded by a mutex never held while a store is asked
// anything (GetClusterStatus is thread-safe). A store passed to Host is not
// owned and must outlive the directory (Unhost does not end that: a caller
// may still hold the pointer it read before).
class GroupDirectory {
 public:
  struct Leader {
    uint64_t id = 0;      // 0: none known
    std::string address;  // client address; empty when not known
  };
  // The shard map as this node serves it: the adopted map's groups and
  // epoch, else the layout's.
  struct View {
    uint64_t epoch = 0;
    std::vector<GroupPlacement> groups;
  };

  // `hosted` maps group ids to this node's replicas (not owned: they must
  // outlive the directory); `peers` gives the nodes' client addresses.
  GroupDirectory(uint64_t node_id, ShardLayout layout,
                 std::vector<ClusterNode> peers,
                 std::map<uint32_t, ReplicatedStore*> hosted);

  uint64_t node_id() const { return node_id_; }
  const ShardLayout& layout() const { return layout_; }
  const std::vector<ClusterNode>& peers() const { return peers_; }
  // The hosted groups now (a copy).
  std::map<uint32_t, ReplicatedStore*> hosted() const ABSL_LOCKS_EXCLUDED(mu_);
  // This node's replica of `group_id`, or null.
  ReplicatedStore* Hosted(uint32_t group_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND "this node hosts no replica of group G" unless hosted.
  absl::StatusOr<ReplicatedStore*> HostedOrNotFound(uint32_t group_id) const;

  // Starts hosting `group_id` with `store` (replacing any hint of it).
  void Host(uint32_t group_id, ReplicatedStore* store) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops hosting `group_id`; `replicas` and `leader` (0: unknown) are what
  // this node last knew of the group, kept as hints (this node is left out).
  void Unhost(uint32_t group_id, std::vector<uint64_t> replicas,
              uint64_t leader) ABSL_LOCKS_EXCLUDED(mu_);

  // The client address of `node` from --peers (or a hosted group's
  // configuration), empty when unknown.
  std::string ClientAddress(uint64_t node) const;
  // `group_id`'s replicas: a hosted group's live voters (in the served
  // map's order first: its first replica is the preferred leader), else the
  // hint (while no newer map arrived), else the served map's.
  std::vector<uint64_t> ReplicasOf(uint32_t group_id) const;
  // A hosted group: its live leader (none during an election). Any other:
  // the hinted leader, else the group's first replica (ReplicasOf), which
  // leader balancing makes the leader whenever it is up; never this node.
  Leader LeaderOf(uint32_t group_id) const;
  // The refusal of an operation on a group not hosted here: UNAVAILABLE
  // naming the node and the group, with kLeaderAddressPayload = LeaderOf's
  // address when known.
  absl::Status NotHosted(uint32_t group_id) const;
  // The shard map now: the adopted map (its epoch and replicas, the same
  // on every node that adopted it), else the founding layout.
  View CurrentView() const ABSL_LOCKS_EXCLUDED(mu_);

  // Serves `map` (the meta group's stored map, valid: ValidateLayout) from
  // now on if its epoch is above the adopted map's (at least the layout's
  // when none was adopted); true when it did. Maps only move forward,
  // whatever order copies arrive in.
  bool Adopt(ShardLayout map) ABSL_LOCKS_EXCLUDED(mu_);
  // The served map's epoch (CurrentView().epoch, without copying).
  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  // The adopted map, if any (a copy).
  std::optional<ShardLayout> Adopted() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Hint {
    std::vector<uint64_t> replicas;
    uint64_t leader = 0;
    // The served epoch when the hint was left: a newer map replaces its
    // replicas.
    uint64_t epoch = 0;
  };

  uint64_t EpochLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return adopted_.has_value() ? adopted_->epoch : layout_.epoch;
  }

  const uint64_t node_id_;
  const ShardLayout layout_;
  const std::vector<ClusterNode> peers_;
  mutable absl::Mutex mu_;
  std::map<uint32_t, ReplicatedStore*> hosted_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Hint> hints_ ABSL_GUARDED_BY(mu_);
  std::optional<ShardLayout> adopted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_SERVER_GROUP_DIRECTORY_H_
