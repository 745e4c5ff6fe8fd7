#include "replication/member_directory.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace dedup {

void MemberDirectory::Reload(const std::map<uint64_t, std::string>& recorded) {
  absl::MutexLock lock(&mu_);
  for (const ClusterNode& node : configured_) {
    client_address_[node.id] = node.client_address;
  }
  for (const auto& [id, address] : recorded) client_address_[id] = address;
}

absl::Status MemberDirectory::NotLeader(uint64_t leader) const {
  absl::MutexLock lock(&mu_);
  auto it = client_address_.find(leader);
  if (leader == 0 || it == client_address_.end()) {
    return absl::UnavailableError(
        "not the leader, and no leader is known yet (an election is in "
        "progress); retry with backoff");
  }
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "not the leader; the leader is node ", leader, " at ", it->second));
  status.SetPayload(kLeaderAddressPayload, absl::Cord(it->second));
  return status;
}

std::vector<std::string> MemberDirectory::SnapshotSources(uint64_t taker,
                                                          uint64_t self) const {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  if (auto it = client_address_.find(taker); it != client_address_.end()) {
    out.push_back(it->second);
  }
  for (const auto& [id, address] : client_address_) {
    if (id != taker && id != self) out.push_back(address);
  }
  return out;
}

std::vector<ClusterNode> MemberDirectory::Nodes() const {
  std::vector<ClusterNode> nodes;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, address] : client_address_) {
    ClusterNode node;
    node.id = id;
    node.client_address = address;
    for (const ClusterNode& configured : configured_) {
      if (configured.id == id) node.raft_address = configured.raft_address;
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace dedup
