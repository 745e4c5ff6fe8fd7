#include "server/cluster_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "server/checkpoint_fetch.h"
#include "server/checkpoint_streamer.h"
#include "server/cluster_config.h"
#include "server/cluster_service_move.h"
#include "server/operator_call.h"
#include "server/proto_convert.h"
#include "server/rpc_call.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

absl::Status ValidNodeId(uint64_t node_id) {
  if (node_id == 0) return absl::InvalidArgumentError("node_id: must be > 0");
  return absl::OkStatus();
}

// Membership calls change the group only through its leader.
bool RefusedOffLeader(ReplicatedStore* store, const RpcCall& call) {
  absl::Status serving = store->CheckServing();
  if (serving.ok()) return false;
  call.Fail(serving);
  return true;
}

// A stream refused before its first message, counted like a unary call.
class RefusedCheckpointStream final
    : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
 public:
  RefusedCheckpointStream(const grpc::Status& status, Metrics* metrics) {
    metrics->CallStarted();
    metrics->RecordError(Method::kClusterFetchCheckpoint, status.error_code());
    metrics->ObserveDuration(Method::kClusterFetchCheckpoint, 0);
    metrics->CallFinished();
    Finish(status);
  }
  void OnDone() override { delete this; }
};

void FillShardMap(const GroupDirectory& groups,
                  v1::ShardMapResponse& response) {
  const GroupDirectory::View view = groups.CurrentView();
  response.set_epoch(view.epoch);
  response.set_slot_count(kSlotCount);
  for (const GroupPlacement& group : view.groups) {
    v1::ShardGroup* out = response.add_groups();
    out->set_group_id(group.id);
    out->set_first_slot(group.first_slot);
    out->set_end_slot(group.end_slot);
    for (uint64_t id : group.replicas) {
      v1::ShardReplica* replica = out->add_replicas();
      replica->set_node_id(id);
      replica->set_client_address(groups.ClientAddress(id));
    }
    const GroupDirectory::Leader leader = groups.LeaderOf(group.id);
    out->set_leader_node_id(leader.id);
    out->set_leader_address(leader.address);
  }
}

absl::Status NoHosting() {
  return absl::FailedPreconditionError(
      "moving replicas needs --groups > 1 (with one group: cluster add / "
      "remove)");
}

}  // namespace

grpc::ServerUnaryReactor* ClusterService::Status(
    grpc::CallbackServerContext* context,
    const v1::ClusterStatusRequest* request,
    v1::ClusterStatusResponse* response) {
  RpcCall call(context, Method::kClusterStatus, metrics_);
  if (Refused(call, *context, "Cluster.Status")) return call.reactor();
  ReplicatedStore* store = StoreOf(call, request->group_id());
  if (store == nullptr) return call.reactor();
  const ClusterStatus status = store->GetClusterStatus();
  response->set_group_id(request->group_id());
  for (const auto& [id, hosted] : groups_->hosted()) {
    response->add_hosted_groups(id);
  }
  const ConsensusStatus& c = status.consensus;
  response->set_node_id(c.id);
  response->set_role(RoleName(c.role));
  response->set_term(c.term);
  response->set_leader_id(c.leader_id);
  response->set_commit_index(c.commit_index);
  response->set_applied_index(status.state_applied_index);
  response->set_last_index(c.last_index);
  response->set_last_log_term(c.last_log_term);
  response->set_leader_changes(c.leader_changes);
  response->set_replicated_now_ms(status.replicated_now_ms);
  response->set_last_fence(status.last_fence);
  response->set_checkpoint_bytes_fetched(
      CheckpointBytesFetched(request->group_id()));
  for (const ClusterNode& node : status.nodes) {
    if (node.id == c.leader_id)
      response->set_leader_address(node.client_address);
  }
  for (const Member& member : c.members) {
    v1::ClusterMember* out = response->add_members();
    out->set_id(member.id);
    out->set_raft_address(member.raft_address);
    for (const ClusterNode& node : status.nodes) {
      if (node.id == member.id) out->set_client_address(node.client_address);
    }
    out->set_role(MemberRoleName(member.role));
    if (c.role == Role::kLeader) {
      const uint64_t match =
          member.id == c.id ? c.last_index : member.match_index;
      out->set_match_index(match);
      out->set_lag(c.last_index > match ? c.last_index - match : 0);
    }
  }
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::Digest(
    grpc::CallbackServerContext* context, const v1::DigestRequest* request,
    v1::DigestResponse* response) {
  RpcCall call(context, Method::kClusterDigest, metrics_);
  if (Refused(call, *context, "Cluster.Digest")) return call.reactor();
  ReplicatedStore* store = StoreOf(call, request->group_id());
  if (store == nullptr) return call.reactor();
  // A full scan: never on a gRPC callback thread.
  tasks_.Start([store, call, response] {
    absl::StatusOr<StateDigest> digest = store->Digest();
    if (!digest.ok()) {
      call.Fail(digest.status());
      return;
    }
    response->set_applied_index(digest->applied_index);
    response->set_replicated_now_ms(digest->now_ms);
    response->set_live_records(digest->live_records);
    response->set_digest(absl::StrFormat("%016x", digest->hash));
    call.Finish(grpc::Status::OK);
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::AddNode(
    grpc::CallbackServerContext* context, const v1::AddNodeRequest* request,
    v1::AddNodeResponse* /*response*/) {
  RpcCall call(context, Method::kClusterAddNode, metrics_);
  if (Refused(call, *context, "Cluster.AddNode")) return call.reactor();
  if (call.Rejected(ValidNodeId(request->node_id()))) return call.reactor();
  absl::StatusOr<std::string> raft = ResolveIpv4(request->raft_address());
  if (!raft.ok()) {
    call.Rejected(absl::InvalidArgumentError(
        absl::StrCat("raft_address: ", raft.status().message())));
    return call.reactor();
  }
  ReplicatedStore* store = StoreOf(call, request->group_id());
  if (store == nullptr || RefusedOffLeader(store, call)) return call.reactor();
  ClusterNode node{request->node_id(), *raft, request->client_address()};
  store->AddMember(
      std::move(node),
      [this, call, store, group = request->group_id()](absl::Status s) {
        FinishMembership(call, store, group, s);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::RemoveNode(
    grpc::CallbackServerContext* context, const v1::RemoveNodeRequest* request,
    v1::RemoveNodeResponse* /*response*/) {
  RpcCall call(context, Method::kClusterRemoveNode, metrics_);
  if (Refused(call, *context, "Cluster.RemoveNode")) return call.reactor();
  if (call.Rejected(ValidNodeId(request->node_id()))) return call.reactor();
  ReplicatedStore* store = StoreOf(call, request->group_id());
  if (store == nullptr || RefusedOffLeader(store, call)) return call.reactor();
  store->RemoveMember(
      request->node_id(),
      [this, call, store, group = request->group_id()](absl::Status s) {
        FinishMembership(call, store, group, s);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::TransferLeadership(
    grpc::CallbackServerContext* context,
    const v1::TransferLeadershipRequest* request,
    v1::TransferLeadershipResponse* response) {
  RpcCall call(context, Method::kClusterTransferLeadership, metrics_);
  if (Refused(call, *context, "Cluster.TransferLeadership")) {
    return call.reactor();
  }
  ReplicatedStore* store = StoreOf(call, request->group_id());
  if (store == nullptr || RefusedOffLeader(store, call)) return call.reactor();
  store->TransferLeadership(
      request->node_id(), [store, call, response](absl::Status s) {
        response->set_leader_id(store->GetClusterStatus().consensus.leader_id);
        call.Fail(s);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::ShardMap(
    grpc::CallbackServerContext* context,
    const v1::ShardMapRequest* /*request*/, v1::ShardMapResponse* response) {
  RpcCall call(context, Method::kClusterShardMap, metrics_);
  if (Refused(call, *context, "Cluster.ShardMap")) return call.reactor();
  FillShardMap(*groups_, *response);
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::HostGroup(
    grpc::CallbackServerContext* context, const v1::HostGroupRequest* request,
    v1::HostGroupResponse* response) {
  RpcCall call(context, Method::kClusterHostGroup, metrics_);
  if (Refused(call, *context, "Cluster.HostGroup")) return call.reactor();
  if (hosting_ == nullptr) {
    call.Fail(NoHosting());
    return call.reactor();
  }
  tasks_.Start([this, group = request->group_id(), call, response] {
    absl::Status s = hosting_->Host(group);
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      response->set_already_hosted(true);
      s = absl::OkStatus();
    }
    call.Fail(s);
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::DropGroup(
    grpc::CallbackServerContext* context, const v1::DropGroupRequest* request,
    v1::DropGroupResponse* response) {
  RpcCall call(context, Method::kClusterDropGroup, metrics_);
  if (Refused(call, *context, "Cluster.DropGroup")) return call.reactor();
  if (hosting_ == nullptr) {
    call.Fail(NoHosting());
    return call.reactor();
  }
  tasks_.Start([this, group = request->group_id(), call, response] {
    absl::Status s = hosting_->Drop(group);
    response->set_dropped(s.ok());
    if (s.code() == absl::StatusCode::kNotFound) s = absl::OkStatus();
    call.Fail(s);
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::MoveReplica(
    grpc::CallbackServerContext* context, const v1::MoveReplicaRequest* request,
    v1::MoveReplicaResponse* response) {
  RpcCall call(context, Method::kClusterMoveReplica, metrics_);
  if (Refused(call, *context, "Cluster.MoveReplica")) return call.reactor();
  if (hosting_ == nullptr) {
    call.Fail(NoHosting());
    return call.reactor();
  }
  tasks_.Start([this, request, call, response] {
    absl::StatusOr<v1::MoveReplicaResponse> moved =
        dedup::MoveReplica(*groups_, open_peer_, publisher_, *request);
    if (!moved.ok()) {
      call.Fail(moved.status());
      return;
    }
    *response = *std::move(moved);
    call.Finish(grpc::Status::OK);
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* ClusterService::SetGroupReplicas(
    grpc::CallbackServerContext* context,
    const v1::SetGroupReplicasRequest* request,
    v1::SetGroupReplicasResponse* response) {
  RpcCall call(context, Method::kClusterSetGroupReplicas, metrics_);
  if (Refused(call, *context, "Cluster.SetGroupReplicas")) {
    return call.reactor();
  }
  ReplicatedStore* meta = groups_->Hosted(0);
  if (meta == nullptr) {
    call.Fail(groups_->NotHosted(0));
    return call.reactor();
  }
  // Off the leader the write is refused naming it.
  if (RefusedOffLeader(meta, call)) return call.reactor();
  tasks_.Start([this, meta, request, call, response] {
    absl::StatusOr<uint64_t> epoch =
        SetGroupReplicasOn(*meta, groups_->layout(), request->group_id(),
                           std::vector<uint64_t>(request->replicas().begin(),
                                                 request->replicas().end()),
                           absl::Seconds(10));
    if (!epoch.ok()) {
      call.Fail(epoch.status());
      return;
    }
    response->set_epoch(*epoch);
    call.Finish(grpc::Status::OK);
  });
  return call.reactor();
}

void ClusterService::FinishMembership(const RpcCall& call,
                                      ReplicatedStore* store, uint32_t group_id,
                                      absl::Status s) {
  if (!s.ok() || publisher_ == nullptr) {
    call.Fail(s);
    return;
  }
  // The leader's configuration, just committed.
  std::vector<uint64_t> voters;
  for (const Member& member : store->GetClusterStatus().consensus.members) {
    if (member.role == MemberRole::kVoter) voters.push_back(member.id);
  }
  tasks_.Start([this, call, group_id, voters = std::move(voters)] {
    absl::StatusOr<uint64_t> epoch = publisher_->Publish(group_id, voters);
    if (!epoch.ok()) {
      LogWarning("group ", group_id, ": ", epoch.status().message());
    }
    call.Finish(grpc::Status::OK);
  });
}

ReplicatedStore* ClusterService::StoreOf(const RpcCall& call,
                                         uint32_t group_id) const {
  absl::StatusOr<ReplicatedStore*> store = groups_->HostedOrNotFound(group_id);
  if (store.ok()) return *store;
  call.Fail(store.status());
  return nullptr;
}

void ClusterService::EnterLameDuck() { lame_duck_.Enter(); }

void ClusterService::JoinTasks() { tasks_.JoinAll(); }

bool ClusterService::Refused(const RpcCall& call,
                             const grpc::CallbackServerContext& context,
                             absl::string_view what) const {
  return RefusedOperatorCall(call, *auth_, lame_duck_, context, what);
}

grpc::ServerWriteReactor<v1::CheckpointChunk>* ClusterService::FetchCheckpoint(
    grpc::CallbackServerContext* context,
    const v1::FetchCheckpointRequest* request) {
  absl::Status allowed = auth_
                             ->Authorize(*context, TenantRole::kOperator,
                                         "Cluster.FetchCheckpoint")
                             .status();
  // Draining: a new stream is refused (the fetching node asks another
  // source); the streams already running go on until the drain ends.
  if (allowed.ok()) allowed = lame_duck_.Check();
  absl::StatusOr<ReplicatedStore*> store =
      groups_->HostedOrNotFound(request->group_id());
  if (allowed.ok()) allowed = store.status();
  if (!allowed.ok()) {
    return new RefusedCheckpointStream(ToGrpcStatus(allowed), metrics_);
  }
  return StartCheckpointStream(*store, request->min_applied_index(), metrics_,
                               &tasks_);
}

}  // namespace dedup
