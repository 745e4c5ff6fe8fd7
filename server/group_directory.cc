#include "server/group_directory.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "storage/store.h"

namespace dedup {

GroupDirectory::GroupDirectory(uint64_t node_id, ShardLayout layout,
                               std::vector<ClusterNode> peers,
                               std::map<uint32_t, ReplicatedStore*> hosted)
    : node_id_(node_id),
      layout_(std::move(layout)),
      peers_(std::move(peers)),
      hosted_(std::move(hosted)) {}

ReplicatedStore* GroupDirectory::Hosted(uint32_t group_id) const {
  auto it = hosted_.find(group_id);
  return it == hosted_.end() ? nullptr : it->second;
}

absl::StatusOr<ReplicatedStore*> GroupDirectory::HostedOrNotFound(
    uint32_t group_id) const {
  if (ReplicatedStore* store = Hosted(group_id)) return store;
  return absl::NotFoundError(
      absl::StrCat("this node hosts no replica of group ", group_id));
}

std::string GroupDirectory::ClientAddress(uint64_t node) const {
  for (const ClusterNode& peer : peers_) {
    if (peer.id == node) return peer.client_address;
  }
  // Members added after this node started (one group) are known only to
  // the group's configuration.
  for (const auto& [id, store] : hosted_) {
    for (const ClusterNode& known : store->GetClusterStatus().nodes) {
      if (known.id == node) return known.client_address;
    }
  }
  return "";
}

GroupDirectory::Leader GroupDirectory::LeaderOf(uint32_t group_id) const {
  Leader leader;
  if (ReplicatedStore* store = Hosted(group_id)) {
    leader.id = store->GetClusterStatus().consensus.leader_id;
  } else if (const GroupPlacement* group = layout_.Find(group_id);
             group != nullptr && !group->replicas.empty()) {
    leader.id = group->replicas.front();
  }
  if (leader.id != 0) leader.address = ClientAddress(leader.id);
  return leader;
}

absl::Status GroupDirectory::NotHosted(uint32_t group_id) const {
  const Leader leader = LeaderOf(group_id);
  absl::Status status = absl::UnavailableError(
      absl::StrCat("node ", node_id_, " hosts no replica of group ", group_id,
                   leader.address.empty()
                       ? "; ask a node that does (Cluster.ShardMap)"
                       : absl::StrCat("; its leader is likely node ", leader.id,
                                      " at ", leader.address)));
  if (!leader.address.empty()) {
    status.SetPayload(kLeaderAddressPayload, absl::Cord(leader.address));
  }
  return status;
}

}  // namespace dedup
