// Smart routing for a sharded cluster: which node a client sends a key's
// call to, by the key's slot (common/slot.h) and the cluster's shard map
// (dedup.v1.Cluster.ShardMap).
//
// The router fetches the map from the configured nodes (the first that
// answers). It routes each key to the LeaderRouter of its slot's group,
// whose addresses are the group's last known leader then its replicas, so a
// follower's redirect, a failed node and the retry rule (retry_decision.h)
// work within the group exactly as they do for a whole single-group cluster.
// Without a map (a single node answers UNIMPLEMENTED, or every node failed,
// or no answer yet) every call goes through the seed router: the configured
// addresses with today's leader following.
//
// After each answer, Observe reads the trailers dedupd sets in cluster mode:
// "dedup-shard-epoch" above the held map's epoch, or a "dedup-leader" naming
// an address the map does not hold, fetches the map again (from that node
// first; at most one fetch per second, one at a time, in the background); a
// "dedup-leader" on an answer that is not UNAVAILABLE (a forwarded call)
// moves that group's router to the leader it names (an UNAVAILABLE's hint
// is the retry rule's to follow).
//
// Thread-safe. The destructor cancels a fetch in progress and waits for it.
#ifndef DEDUP_CLIENT_SHARD_ROUTER_H_
#define DEDUP_CLIENT_SHARD_ROUTER_H_

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/leader_router.h"
#include "dedup/v1/cluster.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace dedup {

// A shard map a client can route by: groups ordered, covering
// [0, kSlotCount) without gaps or overlaps. Pure.
struct ShardTable {
  uint64_t epoch = 0;
  // Per group, in slot order.
  std::vector<v1::ShardGroup> groups;

  // The index in `groups` of the group owning `slot` (< kSlotCount).
  [[nodiscard]] size_t IndexOf(uint32_t slot) const;
};

// `map` checked as above; INVALID_ARGUMENT saying what is wrong.
[[nodiscard]] absl::StatusOr<ShardTable> ToShardTable(
    const v1::ShardMapResponse& map);

// The addresses a group's calls try, in order: its leader, then its
// replicas (empty addresses left out, each once).
[[nodiscard]] std::vector<std::string> GroupAddresses(
    const v1::ShardGroup& group);

class ShardRouter {
 public:
  static constexpr uint32_t kNoGroup = std::numeric_limits<uint32_t>::max();

  // Where a call goes: `router` (never null) and the group it serves
  // (kNoGroup for the seed router).
  struct Route {
    std::shared_ptr<LeaderRouter> router;
    uint32_t group = kNoGroup;
  };

  // `seed`: the configured nodes. `fetch_deadline`: of each ShardMap call,
  // at most 2 s (a cheap read: a node slower than that is passed over).
  ShardRouter(std::shared_ptr<LeaderRouter> seed,
              absl::Duration fetch_deadline);
  ~ShardRouter();

  ShardRouter(const ShardRouter&) = delete;
  ShardRouter& operator=(const ShardRouter&) = delete;

  // Starts the first fetch of the map, once (later calls do nothing).
  // Never blocks.
  void Start();
  // Start(), then waits until the first fetch ended (with a map or not), at
  // most `timeout` and never over 1 s (calls are correct without a map:
  // any node forwards). For callers that block anyway: their first call
  // then goes straight to its group.
  void AwaitFirstFetch(absl::Duration timeout);

  // The route of (ns, key) by the map held now.
  [[nodiscard]] Route RouteOf(absl::string_view ns,
                              absl::string_view key) const;
  // The route of a group by id (the seed's when the map holds no such
  // group).
  [[nodiscard]] Route RouteOfGroup(uint32_t group) const;

  // An attempt on `route` sent to `endpoint` ended with `status`; reads the
  // trailers of `context` as the header says.
  void Observe(const Route& route, const Endpoint& endpoint,
               const grpc::ClientContext& context, const grpc::Status& status);

  // A Session operation sent on `route` to `endpoint` was refused with a
  // redirect to `leader` (its ItemError.leader; a stream has no trailers):
  // fetches the map again, as Observe does, when the map held does not
  // name `leader` as a replica of the route's group (the group moved, or
  // the map is older than the node's).
  void ObserveRedirect(const Route& route, const Endpoint& endpoint,
                       const std::string& leader);

  // The epoch of the map held; 0 when none is.
  [[nodiscard]] uint64_t epoch() const;

  LeaderRouter& seed() const { return *seed_; }

 private:
  struct Map;
  struct Fetch;

  std::shared_ptr<const Map> CurrentMap() const;
  // Starts a fetch from `first` (may be null) then the seed's endpoints,
  // unless one runs, the router closes, or (unless `first_fetch`) the last
  // started less than a second ago.
  void Refresh(std::shared_ptr<const Endpoint> first, bool first_fetch);
  // Sends fetch->candidates[fetch->next]'s ShardMap call, or ends the fetch.
  void FetchNext(Fetch* fetch);
  void OnFetched(Fetch* fetch, const grpc::Status& status);
  void Install(ShardTable table);
  void EndFetch(Fetch* fetch);

  const std::shared_ptr<LeaderRouter> seed_;
  const absl::Duration fetch_deadline_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const Map> map_ ABSL_GUARDED_BY(mu_);

  // The fetch's lifecycle. A std::mutex, not absl::Mutex: the destructor
  // destroys it right after the fetch's last unlock, which POSIX allows.
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  bool started_ = false;                          // guarded by fetch_mu_
  bool first_done_ = false;                       // guarded by fetch_mu_
  bool closing_ = false;                          // guarded by fetch_mu_
  Fetch* fetching_ = nullptr;                     // guarded by fetch_mu_
  absl::Time last_fetch_ = absl::InfinitePast();  // guarded by fetch_mu_
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_SHARD_ROUTER_H_
