// Where dedup-bench sends each dedupd call: over its fixed channels to the
// one --address (a sharded cluster's node forwards the calls of groups it
// does not lead: one extra hop), or by slot, straight to the leader of the
// key's group as a sharded client does (client/shard_router.h).
//
// With slot routing, each of the backend's connections has its own
// ShardRouter over its own EndpointPool, whose channels carry that
// connection's channel argument, so connection i is one TCP connection per
// node, as it is one to --address without routing.
#ifndef DEDUP_BENCH_LOAD_SLOT_ROUTES_H_
#define DEDUP_BENCH_LOAD_SLOT_ROUTES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/leader_router.h"
#include "client/shard_router.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace dedup::bench {

// auto: shard when the cluster's shard map holds more than one group, else
// fixed. fixed: every call to --address. shard: by slot.
enum class RouteMode { kAuto, kFixed, kShard };

// "auto", "fixed" or "shard"; false for anything else.
[[nodiscard]] bool ParseRouteMode(absl::string_view text, RouteMode* mode);

// The channel argument that makes connection `conn` its own subchannel.
inline constexpr char kChannelArg[] = "dedup.bench.channel";

// Opens insecure channels carrying kChannelArg = conn.
[[nodiscard]] ChannelFactory ConnectionChannelFactory(int conn);

// The number of groups in the shard map `channel`'s node answers (1 for a
// server without Cluster.ShardMap: a single node or an unsharded dedupd),
// or the call's error.
[[nodiscard]] absl::StatusOr<int> ShardGroupCount(
    const std::shared_ptr<grpc::Channel>& channel);

// One call's destination: `stub`, and with slot routing what Observe needs
// to follow the group's leader. Copyable; holds the endpoint alive.
struct CallTarget {
  v1::Dedup::Stub* stub = nullptr;
  ShardRouter* shards = nullptr;  // null: a fixed channel
  ShardRouter::Route route;
  std::shared_ptr<const Endpoint> endpoint;

  // Reads the finished call's trailers (leader hints, a newer map epoch).
  void Observe(const grpc::ClientContext& context,
               const grpc::Status& status) const;
};

// The per-connection routers. Thread-safe after Start.
class SlotRoutes {
 public:
  SlotRoutes(std::string address, int connections);
  ~SlotRoutes();

  // Fetches every connection's map from `address`. Empty on success, else
  // why a connection holds none.
  [[nodiscard]] std::string Start();

  // The leader of `key`'s group, on connection `conn`.
  [[nodiscard]] CallTarget OfKey(int conn, absl::string_view ns,
                                 absl::string_view key) const;
  // The leader of `group`, on connection `conn`.
  [[nodiscard]] CallTarget OfGroup(int conn, uint32_t group) const;
  // The group of `key` by connection `conn`'s map.
  [[nodiscard]] uint32_t GroupOf(int conn, absl::string_view ns,
                                 absl::string_view key) const;

 private:
  static CallTarget TargetOf(ShardRouter& shards, ShardRouter::Route route);

  const std::string address_;
  std::vector<std::unique_ptr<ShardRouter>> shards_;  // one per connection
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_SLOT_ROUTES_H_
