// dedup.v1.Cluster: status, digest, membership and leadership of the
// replicated group (cluster mode only).
#ifndef DEDUP_SERVER_CLUSTER_SERVICE_H_
#define DEDUP_SERVER_CLUSTER_SERVICE_H_

#include "dedup/v1/cluster.grpc.pb.h"
#include "replication/replicated_store.h"
#include "server/auth.h"

namespace dedup {

// Thread-safe. Does not own `store` or `auth`, which must outlive every
// call. Every call needs the operator role (FetchCheckpoint copies the whole
// database; nodes call it with --peer_token_file's token). Slow
// work (a digest scan, membership changes) never runs on gRPC's callback
// threads: digests run on a thread of their own, membership changes finish
// from the consensus thread.
class ClusterService final : public v1::Cluster::CallbackService {
 public:
  ClusterService(ReplicatedStore* store, const Authorizer* auth)
      : store_(store), auth_(auth) {}

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
  // Between nodes; see checkpoint_streamer.h.
  grpc::ServerWriteReactor<v1::CheckpointChunk>* FetchCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::FetchCheckpointRequest* request) override;

 private:
  // True (and the call finished) unless the caller is an operator.
  bool Refused(grpc::CallbackServerContext* context,
               grpc::ServerUnaryReactor* reactor, absl::string_view what) const;

  ReplicatedStore* const store_;
  const Authorizer* const auth_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_SERVICE_H_
