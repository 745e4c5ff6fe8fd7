#include "server/cluster_service_peers.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "server/proto_convert.h"
#include "storage/store.h"

namespace dedup {

absl::Status FromCall(const grpc::Status& status,
                      const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find("dedup-leader"); it != trailers.end()) {
    out.SetPayload(
        kLeaderAddressPayload,
        absl::Cord(std::string(it->second.data(), it->second.size())));
  }
  return out;
}

absl::StatusOr<v1::ClusterStatusResponse> FindGroupLeader(
    const ChannelFactory& open, const std::vector<NodeAt>& candidates,
    uint32_t group_id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::ClusterStatusRequest request;
  request.set_group_id(group_id);
  absl::Status last = absl::UnavailableError("no node to ask");
  while (true) {
    for (const NodeAt& peer : candidates) {
      if (peer.address.empty()) continue;
      v1::ClusterStatusResponse status;
      last = CallPeer(open, peer.address, &v1::Cluster::Stub::Status, request,
                      &status, absl::Seconds(3));
      if (!last.ok()) continue;
      if (status.role() == "leader") return status;
      if (status.leader_address().empty()) continue;
      // The leader it names, asked at once.
      v1::ClusterStatusResponse named;
      if (CallPeer(open, status.leader_address(), &v1::Cluster::Stub::Status,
                   request, &named, absl::Seconds(3))
              .ok() &&
          named.role() == "leader") {
        return named;
      }
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::UnavailableError(
      absl::StrCat("no leader of group ", group_id,
                   " answered (last: ", last.message(), ")"));
}

std::string RoleOf(const v1::ClusterStatusResponse& status, uint64_t node) {
  for (const v1::ClusterMember& member : status.members()) {
    if (member.id() == node) return member.role();
  }
  return "";
}

std::vector<uint64_t> VotersOf(const v1::ClusterStatusResponse& status) {
  std::vector<uint64_t> voters;
  for (const v1::ClusterMember& member : status.members()) {
    if (member.role() == "voter") voters.push_back(member.id());
  }
  return voters;
}

}  // namespace dedup
