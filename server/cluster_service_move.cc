#include "server/cluster_service_move.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "server/cluster_service_peers.h"

namespace dedup {
namespace {

// Steps a move may take before giving up (each changes the configuration
// or hosting once; a few more for leader changes in between).
constexpr int kMaxRounds = 16;

bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kAborted ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

class Mover {
 public:
  Mover(const GroupDirectory& directory, const ChannelFactory& open,
        const ShardMapPublisher* publisher,
        const v1::MoveReplicaRequest& request, const MoveLimits& limits)
      : directory_(directory),
        open_(open),
        publisher_(publisher),
        group_(request.group_id()),
        from_(request.from_node_id()),
        to_(request.to_node_id()),
        limits_(limits) {}

  absl::StatusOr<v1::MoveReplicaResponse> Run();

 private:
  absl::Status Validate();
  // One step towards the move from `leader`'s view; sets done_ when the
  // move is complete.
  absl::Status Step(const v1::ClusterStatusResponse& leader);
  absl::Status HostOnTo();
  absl::Status AddTo(const v1::ClusterStatusResponse& leader);
  absl::Status HandOff(const v1::ClusterStatusResponse& leader);
  absl::Status RemoveFrom(const v1::ClusterStatusResponse& leader);
  absl::Status DropOnFrom();
  // Writes `voters` as the group's replicas into the shard map.
  absl::Status PublishReplicas(const std::vector<uint64_t>& voters);
  std::vector<NodeAt> Candidates() const;
  std::string LeaderAddress(const v1::ClusterStatusResponse& leader) const {
    return leader.leader_address().empty()
               ? directory_.ClientAddress(leader.node_id())
               : leader.leader_address();
  }
  void Note(std::string step) {
    LogInfo("move of group ", group_, " from node ", from_, " to node ", to_,
            ": ", step);
    response_.add_steps(std::move(step));
  }

  const GroupDirectory& directory_;
  const ChannelFactory& open_;
  const ShardMapPublisher* const publisher_;
  const uint32_t group_;
  const uint64_t from_;
  const uint64_t to_;
  const MoveLimits limits_;
  size_t rf_ = 0;
  std::string from_address_;
  std::string to_address_;
  std::string to_raft_address_;
  bool done_ = false;
  v1::MoveReplicaResponse response_;
};

absl::Status Mover::Validate() {
  const GroupPlacement* placement = directory_.layout().Find(group_);
  if (placement == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("group_id: there is no group ", group_));
  }
  rf_ = placement->replicas.size();
  if (from_ == 0 || to_ == 0) {
    return absl::InvalidArgumentError("from_node_id, to_node_id: must be > 0");
  }
  if (from_ == to_) {
    return absl::FailedPreconditionError(
        absl::StrCat("from and to are both node ", from_));
  }
  for (const ClusterNode& peer : directory_.peers()) {
    if (peer.id == from_) from_address_ = peer.client_address;
    if (peer.id == to_) {
      to_address_ = peer.client_address;
      to_raft_address_ = peer.raft_address;
    }
  }
  if (from_address_.empty() || to_address_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", from_address_.empty() ? from_ : to_,
        " is not in --peers (only founding nodes can host moved replicas)"));
  }
  return absl::OkStatus();
}

std::vector<NodeAt> Mover::Candidates() const {
  std::vector<NodeAt> candidates;
  for (uint64_t id : directory_.ReplicasOf(group_)) {
    candidates.push_back({id, directory_.ClientAddress(id)});
  }
  for (const ClusterNode& peer : directory_.peers()) {
    candidates.push_back({peer.id, peer.client_address});
  }
  return candidates;
}

absl::StatusOr<v1::MoveReplicaResponse> Mover::Run() {
  if (absl::Status s = Validate(); !s.ok()) return s;
  absl::Status last;
  for (int round = 0; round < kMaxRounds && !done_; ++round) {
    absl::StatusOr<v1::ClusterStatusResponse> leader =
        FindGroupLeader(open_, Candidates(), group_, limits_.step);
    if (!leader.ok()) return leader.status();
    last = Step(*leader);
    if (!last.ok() && !Retryable(last)) return last;
    if (!last.ok()) {
      LogWarning("move of group ", group_, ": ", last.message(),
                 " (trying again)");
      absl::SleepFor(absl::Milliseconds(500));
    }
  }
  if (!done_) {
    return absl::UnavailableError(absl::StrCat(
        "the move of group ", group_, " did not finish (last: ", last.message(),
        "); run it again to resume"));
  }
  return response_;
}

absl::Status Mover::Step(const v1::ClusterStatusResponse& leader) {
  const std::vector<uint64_t> voters = VotersOf(leader);
  const std::string from_role = RoleOf(leader, from_);
  const std::string to_role = RoleOf(leader, to_);
  if (from_role.empty()) {
    if (to_role != "voter") {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", from_, " is not a replica of group ", group_));
    }
    if (absl::Status s = PublishReplicas(voters); !s.ok()) return s;
    if (absl::Status s = DropOnFrom(); !s.ok()) return s;
    for (uint64_t id : voters) response_.add_replicas(id);
    done_ = true;
    return absl::OkStatus();
  }
  const bool mid_move = to_role == "voter" && voters.size() == rf_ + 1;
  if (to_role == "voter" && !mid_move) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", to_, " already hosts a replica of group ", group_));
  }
  if (voters.size() != rf_ && !mid_move) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", group_, " has ", voters.size(), " voters (",
        absl::StrJoin(voters, ","), "), not its replication factor ", rf_,
        ": the move would change it"));
  }
  if (to_role != "voter") {
    if (absl::Status s = HostOnTo(); !s.ok()) return s;
    return AddTo(leader);
  }
  if (leader.node_id() == from_) return HandOff(leader);
  return RemoveFrom(leader);
}

absl::Status Mover::HostOnTo() {
  v1::HostGroupRequest request;
  request.set_group_id(group_);
  v1::HostGroupResponse response;
  absl::Status s = CallPeer(open_, to_address_, &v1::Cluster::Stub::HostGroup,
                            request, &response, limits_.step);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("node ", to_, " hosting group ",
                                               group_, ": ", s.message()));
  }
  Note(response.already_hosted()
           ? absl::StrCat("node ", to_, " already hosts an empty replica")
           : absl::StrCat("node ", to_, " hosts an empty replica"));
  return absl::OkStatus();
}

absl::Status Mover::AddTo(const v1::ClusterStatusResponse& leader) {
  if (!RoleOf(leader, to_).empty()) {
    // A learner left by a move cut short: added again from the start.
    v1::RemoveNodeRequest remove;
    remove.set_node_id(to_);
    remove.set_group_id(group_);
    v1::RemoveNodeResponse removed;
    absl::Status s =
        CallPeer(open_, LeaderAddress(leader), &v1::Cluster::Stub::RemoveNode,
                 remove, &removed, limits_.step);
    if (!s.ok()) return s;
    Note(absl::StrCat("removed node ", to_, ", a learner left unpromoted"));
  }
  v1::AddNodeRequest add;
  add.set_node_id(to_);
  add.set_raft_address(to_raft_address_);
  add.set_client_address(to_address_);
  add.set_group_id(group_);
  v1::AddNodeResponse added;
  absl::Status s =
      CallPeer(open_, LeaderAddress(leader), &v1::Cluster::Stub::AddNode, add,
               &added, limits_.catch_up);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("adding node ", to_, ": ", s.message()));
  }
  Note(absl::StrCat("node ", to_,
                    " added as a learner, caught up and promoted to voter"));
  return absl::OkStatus();
}

absl::Status Mover::HandOff(const v1::ClusterStatusResponse& leader) {
  v1::TransferLeadershipRequest request;
  request.set_node_id(0);  // any up-to-date voter
  request.set_group_id(group_);
  v1::TransferLeadershipResponse response;
  absl::Status s = CallPeer(open_, LeaderAddress(leader),
                            &v1::Cluster::Stub::TransferLeadership, request,
                            &response, limits_.step);
  if (!s.ok()) return s;
  Note(absl::StrCat("leadership handed from node ", from_, " to node ",
                    response.leader_id()));
  return absl::OkStatus();
}

absl::Status Mover::RemoveFrom(const v1::ClusterStatusResponse& leader) {
  v1::RemoveNodeRequest request;
  request.set_node_id(from_);
  request.set_group_id(group_);
  v1::RemoveNodeResponse response;
  absl::Status s =
      CallPeer(open_, LeaderAddress(leader), &v1::Cluster::Stub::RemoveNode,
               request, &response, limits_.step);
  if (!s.ok()) return s;
  Note(absl::StrCat("node ", from_, " removed from the group"));
  return absl::OkStatus();
}

absl::Status Mover::DropOnFrom() {
  v1::DropGroupRequest request;
  request.set_group_id(group_);
  v1::DropGroupResponse response;
  absl::Status s = CallPeer(open_, from_address_, &v1::Cluster::Stub::DropGroup,
                            request, &response, limits_.step);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("node ", from_, " dropping ",
                                               "its replica: ", s.message()));
  }
  Note(response.dropped()
           ? absl::StrCat("node ", from_, " dropped its replica")
           : absl::StrCat("node ", from_, " hosts no replica any more"));
  return absl::OkStatus();
}

absl::Status Mover::PublishReplicas(const std::vector<uint64_t>& voters) {
  if (publisher_ == nullptr) return absl::OkStatus();
  absl::StatusOr<uint64_t> epoch =
      publisher_->Publish(group_, voters, limits_.step);
  if (!epoch.ok()) return epoch.status();
  Note(absl::StrCat("shard map epoch ", *epoch, " lists replicas ",
                    absl::StrJoin(voters, ",")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::MoveReplicaResponse> MoveReplica(
    const GroupDirectory& directory, const ChannelFactory& open,
    const ShardMapPublisher* publisher, const v1::MoveReplicaRequest& request,
    const MoveLimits& limits) {
  return Mover(directory, open, publisher, request, limits).Run();
}

}  // namespace dedup
