// dedup.v1.Cluster: status, digest, membership and leadership of the
// replicated groups this node hosts, and the shard map (cluster mode only).
#ifndef DEDUP_SERVER_CLUSTER_SERVICE_H_
#define DEDUP_SERVER_CLUSTER_SERVICE_H_

#include <utility>

#include "common/channel_security.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "replication/replicated_store.h"
#include "server/auth.h"
#include "server/group_directory.h"
#include "server/lame_duck.h"
#include "server/metrics.h"
#include "server/rpc_call.h"
#include "server/shard_map_publish.h"
#include "server/task_threads.h"

namespace dedup {

// Opens and closes this node's replicas while it serves (the daemon).
// Thread-safe; each call blocks (opening or closing a RocksDB, asking other
// nodes): never on a gRPC callback thread.
class GroupHosting {
 public:
  virtual ~GroupHosting() = default;
  // Hosts an empty replica of `group_id` as a joiner (see
  // Cluster.HostGroup). ALREADY_EXISTS when one is hosted.
  [[nodiscard]] virtual absl::Status Host(uint32_t group_id) = 0;
  // Closes this node's replica of `group_id` and deletes its directories
  // once the group's leader no longer lists this node (see
  // Cluster.DropGroup). NOT_FOUND when none is hosted.
  [[nodiscard]] virtual absl::Status Drop(uint32_t group_id) = 0;
};

// Thread-safe. Does not own `groups` or `auth`, which must outlive every
// call. Every call but ShardMap acts on this node's replica of the
// request's group_id (NOT_FOUND when it hosts none). Every call needs the
// operator role (FetchCheckpoint copies the whole database; nodes call it with
// --peer_token_file's token). Slow work (a digest scan, membership changes)
// never runs on gRPC's callback threads: digests run on a thread of their own,
// membership changes finish from the consensus thread.
class ClusterService final : public v1::Cluster::CallbackService {
 public:
  // Not owned; each must outlive the service.
  ClusterService(const GroupDirectory* groups, const Authorizer* auth,
                 Metrics* metrics)
      : groups_(groups), auth_(auth), metrics_(metrics) {}

  grpc::ServerUnaryReactor* Status(
      grpc::CallbackServerContext* context,
      const v1::ClusterStatusRequest* request,
      v1::ClusterStatusResponse* response) override;
  grpc::ServerUnaryReactor* Digest(grpc::CallbackServerContext* context,
                                   const v1::DigestRequest* request,
                                   v1::DigestResponse* response) override;
  grpc::ServerUnaryReactor* AddNode(grpc::CallbackServerContext* context,
                                    const v1::AddNodeRequest* request,
                                    v1::AddNodeResponse* response) override;
  grpc::ServerUnaryReactor* RemoveNode(
      grpc::CallbackServerContext* context,
      const v1::RemoveNodeRequest* request,
      v1::RemoveNodeResponse* response) override;
  grpc::ServerUnaryReactor* TransferLeadership(
      grpc::CallbackServerContext* context,
      const v1::TransferLeadershipRequest* request,
      v1::TransferLeadershipResponse* response) override;
  // Every group with its replicas and leader (a hosted group's live one,
  // else the best hint); one group owning every slot with --groups=1.
  grpc::ServerUnaryReactor* ShardMap(grpc::CallbackServerContext* context,
                                     const v1::ShardMapRequest* request,
                                     v1::ShardMapResponse* response) override;
  // Moving replicas (--groups > 1, after EnableHosting; FAILED_PRECONDITION
  // otherwise); each runs on a thread of its own.
  grpc::ServerUnaryReactor* HostGroup(grpc::CallbackServerContext* context,
                                      const v1::HostGroupRequest* request,
                                      v1::HostGroupResponse* response) override;
  grpc::ServerUnaryReactor* DropGroup(grpc::CallbackServerContext* context,
                                      const v1::DropGroupRequest* request,
                                      v1::DropGroupResponse* response) override;
  grpc::ServerUnaryReactor* MoveReplica(
      grpc::CallbackServerContext* context,
      const v1::MoveReplicaRequest* request,
      v1::MoveReplicaResponse* response) override;
  // Between nodes: on group 0's leader, writes a group's replicas into the
  // stored shard map (on a thread of its own; see cluster.proto).
  grpc::ServerUnaryReactor* SetGroupReplicas(
      grpc::CallbackServerContext* context,
      const v1::SetGroupReplicasRequest* request,
      v1::SetGroupReplicasResponse* response) override;
  // Between nodes; see checkpoint_streamer.h.
  grpc::ServerWriteReactor<v1::CheckpointChunk>* FetchCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::FetchCheckpointRequest* request) override;

  // Serves HostGroup, DropGroup and MoveReplica with `hosting` (not
  // owned; it must outlive the service) and `open` (channels to the other
  // nodes' client ports, with this node's peer credentials). Call it
  // before the server starts.
  void EnableHosting(GroupHosting* hosting, ChannelFactory open) {
    hosting_ = hosting;
    open_peer_ = std::move(open);
  }

  // From then on AddNode, RemoveNode and MoveReplica write the group's new
  // replicas into the shard map (`publisher` not owned; it must outlive
  // the service) before answering. Call it before the server starts.
  void EnableMapPublishing(const ShardMapPublisher* publisher) {
    publisher_ = publisher;
  }

  // From now on new calls (checkpoint streams too) are answered UNAVAILABLE
  // (see lame_duck.h); streams already running go on.
  void EnterLameDuck();
  // Waits for the digests and checkpoint streams still running. Call it
  // after the gRPC server has shut down.
  void JoinTasks();

 private:
  // True (and the call finished) unless the caller is an operator and the
  // server is not in its lame duck.
  bool Refused(const RpcCall& call, const grpc::CallbackServerContext& context,
               absl::string_view what) const;

  // The replica of `group_id`, or null (and the call failed NOT_FOUND).
  ReplicatedStore* StoreOf(const RpcCall& call, uint32_t group_id) const;
  // Finishes a membership call that ended with `s` on `store` (group
  // `group_id`): once it succeeded, on a thread of its own, after writing
  // the group's voters into the shard map (a failure there is logged: the
  // membership did change, and the next change or move writes it).
  void FinishMembership(const RpcCall& call, ReplicatedStore* store,
                        uint32_t group_id, absl::Status s);

  const GroupDirectory* const groups_;
  const Authorizer* const auth_;
  Metrics* const metrics_;
  GroupHosting* hosting_ = nullptr;
  ChannelFactory open_peer_;
  const ShardMapPublisher* publisher_ = nullptr;
  LameDuck lame_duck_;
  // Last: its destructor joins threads that use the members above.
  TaskThreads tasks_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_SERVICE_H_
