#include "server/group_directory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "storage/store.h"

namespace dedup {
namespace {

bool Contains(const std::vector<uint64_t>& ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// `voters` in `preferred`'s order first, then the others in theirs.
std::vector<uint64_t> InOrderOf(const std::vector<uint64_t>& preferred,
                                const std::vector<uint64_t>& voters) {
  std::vector<uint64_t> ordered;
  for (uint64_t id : preferred) {
    if (Contains(voters, id)) ordered.push_back(id);
  }
  for (uint64_t id : voters) {
    if (!Contains(ordered, id)) ordered.push_back(id);
  }
  return ordered;
}

}  // namespace

GroupDirectory::GroupDirectory(uint64_t node_id, ShardLayout layout,
                               std::vector<ClusterNode> peers,
                               std::map<uint32_t, ReplicatedStore*> hosted)
    : node_id_(node_id),
      layout_(std::move(layout)),
      peers_(std::move(peers)),
      hosted_(std::move(hosted)) {}

std::map<uint32_t, ReplicatedStore*> GroupDirectory::hosted() const {
  absl::MutexLock lock(&mu_);
  return hosted_;
}

ReplicatedStore* GroupDirectory::Hosted(uint32_t group_id) const {
  absl::MutexLock lock(&mu_);
  auto it = hosted_.find(group_id);
  return it == hosted_.end() ? nullptr : it->second;
}

absl::StatusOr<ReplicatedStore*> GroupDirectory::HostedOrNotFound(
    uint32_t group_id) const {
  if (ReplicatedStore* store = Hosted(group_id)) return store;
  return absl::NotFoundError(
      absl::StrCat("this node hosts no replica of group ", group_id));
}

void GroupDirectory::Host(uint32_t group_id, ReplicatedStore* store) {
  absl::MutexLock lock(&mu_);
  hosted_[group_id] = store;
  hints_.erase(group_id);
}

void GroupDirectory::Unhost(uint32_t group_id, std::vector<uint64_t> replicas,
                            uint64_t leader) {
  replicas.erase(std::remove(replicas.begin(), replicas.end(), node_id_),
                 replicas.end());
  absl::MutexLock lock(&mu_);
  hosted_.erase(group_id);
  hints_[group_id] = {std::move(replicas), leader == node_id_ ? 0 : leader,
                      EpochLocked()};
}

std::string GroupDirectory::ClientAddress(uint64_t node) const {
  for (const ClusterNode& peer : peers_) {
    if (peer.id == node) return peer.client_address;
  }
  // Members added after this node started are known only to the group's
  // configuration.
  for (const auto& [id, store] : hosted()) {
    for (const ClusterNode& known : store->GetClusterStatus().nodes) {
      if (known.id == node) return known.client_address;
    }
  }
  return "";
}

std::vector<uint64_t> GroupDirectory::ReplicasOf(uint32_t group_id) const {
  std::vector<uint64_t> served;
  std::vector<uint64_t> hinted;
  {
    absl::MutexLock lock(&mu_);
    const GroupPlacement* group = adopted_.has_value()
                                      ? adopted_->Find(group_id)
                                      : layout_.Find(group_id);
    if (group != nullptr) served = group->replicas;
    auto hint = hints_.find(group_id);
    if (hint != hints_.end() && hint->second.epoch == EpochLocked()) {
      hinted = hint->second.replicas;
    }
  }
  if (ReplicatedStore* store = Hosted(group_id)) {
    std::vector<uint64_t> voters;
    for (const Member& member : store->GetClusterStatus().consensus.members) {
      if (member.role == MemberRole::kVoter) voters.push_back(member.id);
    }
    // Empty: a joiner not told its configuration yet.
    if (!voters.empty()) return InOrderOf(served, voters);
  }
  if (!hinted.empty()) return InOrderOf(served, hinted);
  return served;
}

GroupDirectory::Leader GroupDirectory::LeaderOf(uint32_t group_id) const {
  Leader leader;
  if (ReplicatedStore* store = Hosted(group_id)) {
    leader.id = store->GetClusterStatus().consensus.leader_id;
  } else {
    {
      absl::MutexLock lock(&mu_);
      auto hint = hints_.find(group_id);
      if (hint != hints_.end()) leader.id = hint->second.leader;
    }
    if (leader.id == 0) {
      for (uint64_t id : ReplicasOf(group_id)) {
        if (id != node_id_) {
          leader.id = id;
          break;
        }
      }
    }
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

GroupDirectory::View GroupDirectory::CurrentView() const {
  absl::MutexLock lock(&mu_);
  const ShardLayout& served = adopted_.has_value() ? *adopted_ : layout_;
  return View{served.epoch, served.groups};
}

bool GroupDirectory::Adopt(ShardLayout map) {
  absl::MutexLock lock(&mu_);
  // The founding map stored at the layout's epoch is taken too: it names
  // the founders where a joiner's layout may name none.
  if (adopted_.has_value() ? map.epoch <= adopted_->epoch
                           : map.epoch < layout_.epoch) {
    return false;
  }
  adopted_ = std::move(map);
  return true;
}

uint64_t GroupDirectory::epoch() const {
  absl::MutexLock lock(&mu_);
  return EpochLocked();
}

std::optional<ShardLayout> GroupDirectory::Adopted() const {
  absl::MutexLock lock(&mu_);
  return adopted_;
}

}  // namespace dedup
