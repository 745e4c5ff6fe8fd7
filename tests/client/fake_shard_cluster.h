// A made-up sharded cluster of in-process nodes, for the smart routing of
// the C++ client and dedupctl's cluster shards/nodes: every node serves
// dedup.v1.Dedup (recording which node got which key, answering with its
// own address) and dedup.v1.Cluster's ShardMap (the map the test set) and
// Status (what the test scripted per group). Thread-safe.
#ifndef DEDUP_TESTS_CLIENT_FAKE_SHARD_CLUSTER_H_
#define DEDUP_TESTS_CLIENT_FAKE_SHARD_CLUSTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/slot.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::testing {

// What every node shares: the map, and the log of calls.
struct FakeShardState {
  struct Call {
    std::string node;  // the address that got it
    std::string method;
    std::string key;
  };

  void SetMap(v1::ShardMapResponse map) {
    absl::MutexLock lock(&mu);
    this->map = std::move(map);
  }
  // The epoch every answer's "dedup-shard-epoch" trailer names (0: none).
  void SetTrailerEpoch(uint64_t epoch) {
    absl::MutexLock lock(&mu);
    trailer_epoch = epoch;
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu);
    return log;
  }
  int map_fetches() const {
    absl::MutexLock lock(&mu);
    return fetches;
  }
  void Clear() {
    absl::MutexLock lock(&mu);
    log.clear();
  }

  // How long ShardMap waits before answering.
  void SetMapDelay(absl::Duration delay) {
    absl::MutexLock lock(&mu);
    map_delay = delay;
  }
  absl::Duration MapDelay() const {
    absl::MutexLock lock(&mu);
    return map_delay;
  }

  mutable absl::Mutex mu;
  v1::ShardMapResponse map ABSL_GUARDED_BY(mu);
  absl::Duration map_delay ABSL_GUARDED_BY(mu) = absl::ZeroDuration();
  uint64_t trailer_epoch ABSL_GUARDED_BY(mu) = 0;
  std::vector<Call> log ABSL_GUARDED_BY(mu);
  int fetches ABSL_GUARDED_BY(mu) = 0;
};

class FakeShardNode;

class FakeShardDedup final : public v1::Dedup::Service {
 public:
  explicit FakeShardDedup(FakeShardNode* node) : node_(node) {}
  grpc::Status Begin(grpc::ServerContext* context,
                     const v1::BeginRequest* request,
                     v1::BeginResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   v1::GetResponse* response) override;
  grpc::Status BeginBatch(grpc::ServerContext* context,
                          const v1::BeginBatchRequest* request,
                          v1::BeginBatchResponse* response) override;
  grpc::Status CompleteBatch(grpc::ServerContext* context,
                             const v1::CompleteBatchRequest* request,
                             v1::CompleteBatchResponse* response) override;
  grpc::Status CheckpointBatch(grpc::ServerContext* context,
                               const v1::CheckpointBatchRequest* request,
                               v1::CheckpointBatchResponse* response) override;
  // Begins only: the leader of the key's group (by the state's map)
  // answers DUPLICATE with result "<its address> <key>"; any other node
  // refuses it UNAVAILABLE, naming the leader in ItemError.leader unless
  // SetSessionHints(false).
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream)
      override;

 private:
  FakeShardNode* const node_;
};

class FakeShardCluster final : public v1::Cluster::Service {
 public:
  explicit FakeShardCluster(FakeShardNode* node) : node_(node) {}
  grpc::Status ShardMap(grpc::ServerContext* context,
                        const v1::ShardMapRequest* request,
                        v1::ShardMapResponse* response) override;
  grpc::Status Status(grpc::ServerContext* context,
                      const v1::ClusterStatusRequest* request,
                      v1::ClusterStatusResponse* response) override;

 private:
  FakeShardNode* const node_;
};

// One node on a free loopback port, for the object's life.
class FakeShardNode {
 public:
  // `serve_cluster` false: a single node (Cluster is UNIMPLEMENTED).
  FakeShardNode(std::shared_ptr<FakeShardState> state, bool serve_cluster)
      : state_(std::move(state)), dedup_(this), cluster_(this) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&dedup_);
    if (serve_cluster) builder.RegisterService(&cluster_);
    server_ = builder.BuildAndStart();
  }
  ~FakeShardNode() { server_->Shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // A "dedup-leader" trailer on every answer of this node ("" for none).
  void SetLeaderHint(std::string address) {
    absl::MutexLock lock(&mu_);
    leader_hint_ = std::move(address);
  }
  // What Cluster.Status answers for `group` (NOT_FOUND when not set).
  void SetStatus(uint32_t group, v1::ClusterStatusResponse status) {
    absl::MutexLock lock(&mu_);
    statuses_[group] = std::move(status);
  }

  // Whether a Session refusal names the leader.
  void SetSessionHints(bool on) {
    absl::MutexLock lock(&mu_);
    session_hints_ = on;
  }
  bool session_hints() {
    absl::MutexLock lock(&mu_);
    return session_hints_;
  }

  // Records the call; returns the epoch its trailer names (0: none).
  uint64_t Log(const std::string& method, const std::string& key) {
    absl::MutexLock lock(&state_->mu);
    state_->log.push_back({address(), method, key});
    return state_->trailer_epoch;
  }

  // Records the call and sets the trailers.
  void Record(grpc::ServerContext* context, const std::string& method,
              const std::string& key) {
    const uint64_t epoch = Log(method, key);
    if (epoch > 0) {
      context->AddTrailingMetadata("dedup-shard-epoch", std::to_string(epoch));
    }
    absl::MutexLock lock(&mu_);
    if (!leader_hint_.empty()) {
      context->AddTrailingMetadata("dedup-leader", leader_hint_);
    }
  }

  FakeShardState& state() { return *state_; }

  bool StatusOf(uint32_t group, v1::ClusterStatusResponse* out) {
    absl::MutexLock lock(&mu_);
    const auto it = statuses_.find(group);
    if (it == statuses_.end()) return false;
    *out = it->second;
    return true;
  }

 private:
  const std::shared_ptr<FakeShardState> state_;
  FakeShardDedup dedup_;
  FakeShardCluster cluster_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::string leader_hint_ ABSL_GUARDED_BY(mu_);
  bool session_hints_ ABSL_GUARDED_BY(mu_) = true;
  std::map<uint32_t, v1::ClusterStatusResponse> statuses_ ABSL_GUARDED_BY(mu_);
};

// Every answer names the node that gave it: DUPLICATE with result = its
// address. BeginBatch refuses an item whose key starts with "bad" (as the
// server does, naming it by its position in the RPC), and a whole RPC
// holding a key that starts with "fail".
inline grpc::Status FakeShardDedup::Begin(grpc::ServerContext* context,
                                          const v1::BeginRequest* request,
                                          v1::BeginResponse* response) {
  node_->Record(context, "Begin", request->key());
  response->set_status(v1::BeginResponse::DUPLICATE);
  response->set_result(node_->address());
  return grpc::Status::OK;
}

inline grpc::Status FakeShardDedup::Get(grpc::ServerContext* context,
                                        const v1::GetRequest* request,
                                        v1::GetResponse* response) {
  node_->Record(context, "Get", request->key());
  response->set_found(true);
  response->mutable_record()->set_result(node_->address());
  return grpc::Status::OK;
}

inline grpc::Status FakeShardDedup::BeginBatch(
    grpc::ServerContext* context, const v1::BeginBatchRequest* request,
    v1::BeginBatchResponse* response) {
  for (const v1::BeginRequest& item : request->items()) {
    if (item.key().rfind("fail", 0) == 0) {
      node_->Record(context, "BeginBatch", item.key());
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "fake: refused");
    }
  }
  for (const v1::BeginRequest& item : request->items()) {
    node_->Record(context, "BeginBatch", item.key());
    if (item.key().rfind("bad", 0) == 0) {
      v1::ItemError* error = response->add_items()->mutable_error();
      error->set_code(grpc::StatusCode::INVALID_ARGUMENT);
      error->set_message("items[" + std::to_string(response->items_size() - 1) +
                         "].key: bad");
      continue;
    }
    v1::BeginResponse* answer = response->add_items()->mutable_response();
    answer->set_status(v1::BeginResponse::DUPLICATE);
    answer->set_result(node_->address() + " " + item.key());
  }
  return grpc::Status::OK;
}

inline grpc::Status FakeShardDedup::CompleteBatch(
    grpc::ServerContext* context, const v1::CompleteBatchRequest* request,
    v1::CompleteBatchResponse* response) {
  for (const v1::CompleteRequest& item : request->items()) {
    node_->Record(context, "CompleteBatch", item.key());
    response->add_items()->mutable_response()->set_fence(item.fence());
  }
  return grpc::Status::OK;
}

inline grpc::Status FakeShardDedup::CheckpointBatch(
    grpc::ServerContext* context, const v1::CheckpointBatchRequest* request,
    v1::CheckpointBatchResponse* response) {
  for (const v1::CheckpointRequest& item : request->items()) {
    node_->Record(context, "CheckpointBatch", item.key());
    response->add_items()->mutable_response();
  }
  return grpc::Status::OK;
}

inline grpc::Status FakeShardCluster::ShardMap(grpc::ServerContext*,
                                               const v1::ShardMapRequest*,
                                               v1::ShardMapResponse* response) {
  FakeShardState& state = node_->state();
  absl::SleepFor(state.MapDelay());
  absl::MutexLock lock(&state.mu);
  ++state.fetches;
  *response = state.map;
  return grpc::Status::OK;
}

inline grpc::Status FakeShardCluster::Status(
    grpc::ServerContext*, const v1::ClusterStatusRequest* request,
    v1::ClusterStatusResponse* response) {
  if (!node_->StatusOf(request->group_id(), response)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such group here");
  }
  return grpc::Status::OK;
}

// A map of `groups` equal ranges; group g's replicas are `replicas[g]`
// (node ids 1, 2, ... by position in `nodes`), led by the first.
// The leader address the map names for (ns, key)'s group ("" for none).
inline std::string LeaderOfKey(const v1::ShardMapResponse& map,
                               const std::string& ns, const std::string& key) {
  const uint32_t slot = SlotOf(ns, key);
  for (const v1::ShardGroup& group : map.groups()) {
    if (group.first_slot() <= slot && slot < group.end_slot()) {
      return group.leader_address();
    }
  }
  return "";
}

inline grpc::Status FakeShardDedup::Session(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream) {
  v1::SessionResponse first;
  first.set_max_in_flight(1000);
  if (!stream->Write(first)) return grpc::Status::OK;
  v1::SessionRequest request;
  while (stream->Read(&request)) {
    v1::ShardMapResponse map;
    {
      absl::MutexLock lock(&node_->state().mu);
      map = node_->state().map;
    }
    v1::SessionResponse frame;
    for (const v1::SessionOp& op : request.ops()) {
      v1::SessionAnswer* answer = frame.add_answers();
      answer->set_id(op.id());
      const std::string& key = op.begin().key();
      node_->Log("Session", key);
      const std::string leader = LeaderOfKey(map, op.begin().namespace_(), key);
      if (leader == node_->address()) {
        answer->mutable_begin()->set_status(v1::BeginResponse::DUPLICATE);
        answer->mutable_begin()->set_result(node_->address() + " " + key);
        continue;
      }
      v1::ItemError* error = answer->mutable_error();
      error->set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
      error->set_message("fake: not the leader");
      if (node_->session_hints()) error->set_leader(leader);
    }
    if (!stream->Write(frame)) break;
  }
  return grpc::Status::OK;
}

inline v1::ShardMapResponse MakeShardMap(
    uint64_t epoch, const std::vector<std::string>& nodes,
    const std::vector<std::vector<int>>& replicas) {
  v1::ShardMapResponse map;
  map.set_epoch(epoch);
  map.set_slot_count(16384);
  const uint32_t groups = static_cast<uint32_t>(replicas.size());
  for (uint32_t g = 0; g < groups; ++g) {
    v1::ShardGroup* group = map.add_groups();
    group->set_group_id(g);
    group->set_first_slot(g * 16384 / groups);
    group->set_end_slot((g + 1) * 16384 / groups);
    for (int n : replicas[g]) {
      v1::ShardReplica* replica = group->add_replicas();
      replica->set_node_id(n + 1);
      replica->set_client_address(nodes[n]);
    }
    group->set_leader_node_id(replicas[g][0] + 1);
    group->set_leader_address(nodes[replicas[g][0]]);
  }
  return map;
}

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_CLIENT_FAKE_SHARD_CLUSTER_H_
