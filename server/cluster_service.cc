#include "server/cluster_service.h"

#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "server/checkpoint_streamer.h"
#include "server/cluster_config.h"
#include "server/proto_convert.h"

namespace dedup {
namespace {

// Finishes `reactor` with `status`, naming the leader on a follower.
void FinishWith(grpc::CallbackServerContext* context,
                grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
  if (auto leader = status.GetPayload(kLeaderAddressPayload)) {
    context->AddTrailingMetadata("dedup-leader", std::string(*leader));
  }
  reactor->Finish(ToGrpcStatus(status));
}

// Membership calls change the group only through its leader.
bool RefusedOffLeader(ReplicatedStore* store,
                      grpc::CallbackServerContext* context,
                      grpc::ServerUnaryReactor* reactor) {
  absl::Status serving = store->CheckServing();
  if (serving.ok()) return false;
  FinishWith(context, reactor, serving);
  return true;
}

// A stream refused before its first message.
class RefusedCheckpointStream final
    : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
 public:
  explicit RefusedCheckpointStream(const grpc::Status& status) {
    Finish(status);
  }
  void OnDone() override { delete this; }
};

grpc::ServerWriteReactor<v1::CheckpointChunk>* RefusedStream(
    const grpc::Status& status) {
  return new RefusedCheckpointStream(status);
}

}  // namespace

grpc::ServerUnaryReactor* ClusterService::Status(
    grpc::CallbackServerContext* context,
    const v1::ClusterStatusRequest* /*request*/,
    v1::ClusterStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Refused(context, reactor, "Cluster.Status")) return reactor;
  const ClusterStatus status = store_->GetClusterStatus();
  const ConsensusStatus& c = status.consensus;
  response->set_node_id(c.id);
  response->set_role(RoleName(c.role));
  response->set_term(c.term);
  response->set_leader_id(c.leader_id);
  response->set_commit_index(c.commit_index);
  response->set_applied_index(status.state_applied_index);
  response->set_last_index(c.last_index);
  response->set_leader_changes(c.leader_changes);
  response->set_replicated_now_ms(status.replicated_now_ms);
  response->set_last_fence(status.last_fence);
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
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::Digest(
    grpc::CallbackServerContext* context, const v1::DigestRequest* /*request*/,
    v1::DigestResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Refused(context, reactor, "Cluster.Digest")) return reactor;
  // A full scan: never on a gRPC callback thread.
  std::thread([this, reactor, response] {
    absl::StatusOr<StateDigest> digest = store_->Digest();
    if (!digest.ok()) {
      reactor->Finish(ToGrpcStatus(digest.status()));
      return;
    }
    response->set_applied_index(digest->applied_index);
    response->set_replicated_now_ms(digest->now_ms);
    response->set_live_records(digest->live_records);
    response->set_digest(absl::StrFormat("%016x", digest->hash));
    reactor->Finish(grpc::Status::OK);
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::AddNode(
    grpc::CallbackServerContext* context, const v1::AddNodeRequest* request,
    v1::AddNodeResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Refused(context, reactor, "Cluster.AddNode")) return reactor;
  if (request->node_id() == 0) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "node_id: must be > 0"));
    return reactor;
  }
  absl::StatusOr<std::string> raft = ResolveIpv4(request->raft_address());
  if (!raft.ok()) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("raft_address: ", raft.status().message())));
    return reactor;
  }
  if (RefusedOffLeader(store_, context, reactor)) return reactor;
  ClusterNode node{request->node_id(), *raft, request->client_address()};
  store_->AddMember(std::move(node), [context, reactor](absl::Status s) {
    FinishWith(context, reactor, s);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::RemoveNode(
    grpc::CallbackServerContext* context, const v1::RemoveNodeRequest* request,
    v1::RemoveNodeResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Refused(context, reactor, "Cluster.RemoveNode")) return reactor;
  if (request->node_id() == 0) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "node_id: must be > 0"));
    return reactor;
  }
  if (RefusedOffLeader(store_, context, reactor)) return reactor;
  store_->RemoveMember(request->node_id(), [context, reactor](absl::Status s) {
    FinishWith(context, reactor, s);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::TransferLeadership(
    grpc::CallbackServerContext* context,
    const v1::TransferLeadershipRequest* request,
    v1::TransferLeadershipResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Refused(context, reactor, "Cluster.TransferLeadership")) return reactor;
  if (RefusedOffLeader(store_, context, reactor)) return reactor;
  store_->TransferLeadership(
      request->node_id(), [this, context, reactor, response](absl::Status s) {
        response->set_leader_id(store_->GetClusterStatus().consensus.leader_id);
        FinishWith(context, reactor, s);
      });
  return reactor;
}

bool ClusterService::Refused(grpc::CallbackServerContext* context,
                             grpc::ServerUnaryReactor* reactor,
                             absl::string_view what) const {
  absl::Status allowed =
      auth_->Authorize(*context, TenantRole::kOperator, what).status();
  if (allowed.ok()) return false;
  reactor->Finish(ToGrpcStatus(allowed));
  return true;
}

grpc::ServerWriteReactor<v1::CheckpointChunk>* ClusterService::FetchCheckpoint(
    grpc::CallbackServerContext* context,
    const v1::FetchCheckpointRequest* request) {
  absl::Status allowed = auth_
                             ->Authorize(*context, TenantRole::kOperator,
                                         "Cluster.FetchCheckpoint")
                             .status();
  if (!allowed.ok()) return RefusedStream(ToGrpcStatus(allowed));
  return StartCheckpointStream(store_, request->min_applied_index());
}

}  // namespace dedup
