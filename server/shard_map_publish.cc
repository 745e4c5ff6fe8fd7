#include "server/shard_map_publish.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "replication/shard_layout_codec.h"
#include "server/cluster_service_peers.h"

namespace dedup {
namespace {

bool Contains(const std::vector<uint64_t>& ids, uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kAborted ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// Proposes `map` over `expected_epoch` and waits for its outcome.
absl::Status ProposeAndWait(ReplicatedStore& meta, uint64_t expected_epoch,
                            const ShardLayout& map, absl::Duration timeout) {
  struct Outcome {
    absl::Notification done;
    absl::Status status;
  };
  // Shared: the callback may run after a wait that timed out.
  auto outcome = std::make_shared<Outcome>();
  meta.ProposeShardMap(expected_epoch, map.epoch, EncodeShardLayout(map),
                       [outcome](absl::StatusOr<bool> applied) {
                         outcome->status = applied.status();
                         outcome->done.Notify();
                       });
  if (!outcome->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the shard map at epoch ", map.epoch,
                     " was not applied in time (outcome unknown)"));
  }
  return outcome->status;
}

// The map `meta` stores, the founding layout when none is, with the stored
// epoch (0: none).
absl::StatusOr<std::pair<ShardLayout, uint64_t>> StoredOrFounding(
    ReplicatedStore& meta, const ShardLayout& founding) {
  absl::StatusOr<ReplicatedState::StoredShardMap> stored =
      meta.StoredShardMap();
  if (!stored.ok()) return stored.status();
  if (stored->epoch == 0) return std::make_pair(founding, uint64_t{0});
  absl::StatusOr<ShardLayout> map = DecodeShardLayout(stored->map);
  if (!map.ok()) return map.status();
  return std::make_pair(*std::move(map), stored->epoch);
}

}  // namespace

absl::StatusOr<ShardLayout> WithGroupReplicas(
    const ShardLayout& map, uint32_t group_id,
    const std::vector<uint64_t>& voters) {
  if (voters.empty()) {
    return absl::InvalidArgumentError("replicas: a group needs at least one");
  }
  std::set<uint64_t> distinct;
  for (uint64_t id : voters) {
    if (id == 0 || !distinct.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("replicas: node id ", id, " is 0 or repeated"));
    }
  }
  ShardLayout next = map;
  auto group = std::find_if(
      next.groups.begin(), next.groups.end(),
      [group_id](const GroupPlacement& g) { return g.id == group_id; });
  if (group == next.groups.end()) {
    return absl::NotFoundError(
        absl::StrCat("group_id: there is no group ", group_id));
  }
  std::vector<uint64_t> ordered;
  for (uint64_t id : group->replicas) {
    if (Contains(voters, id)) ordered.push_back(id);
  }
  for (uint64_t id : voters) {
    if (!Contains(ordered, id)) ordered.push_back(id);
  }
  if (ordered == group->replicas) return map;
  group->replicas = std::move(ordered);
  ++next.epoch;
  return next;
}

void ProposeFoundingMap(ReplicatedStore& meta, const ShardLayout& founding,
                        StoreCallback<bool> done) {
  meta.ProposeShardMap(0, founding.epoch, EncodeShardLayout(founding),
                       std::move(done));
}

absl::StatusOr<uint64_t> SetGroupReplicasOn(ReplicatedStore& meta,
                                            const ShardLayout& founding,
                                            uint32_t group_id,
                                            const std::vector<uint64_t>& voters,
                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::pair<ShardLayout, uint64_t>> base =
        StoredOrFounding(meta, founding);
    if (!base.ok()) return base.status();
    const auto& [map, stored_epoch] = *base;
    absl::StatusOr<ShardLayout> next = WithGroupReplicas(map, group_id, voters);
    if (!next.ok()) return next.status();
    if (stored_epoch != 0 && next->epoch == stored_epoch) return stored_epoch;
    absl::Status s =
        ProposeAndWait(meta, stored_epoch, *next, deadline - absl::Now());
    if (s.ok()) return next->epoch;
    // Another write (or the founding map) moved the epoch: read it again.
    if (s.code() != absl::StatusCode::kFailedPrecondition ||
        absl::Now() >= deadline) {
      return s;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

ShardMapPublisher::ShardMapPublisher(
    const GroupDirectory* directory, ChannelFactory open,
    std::function<void(uint64_t epoch)> published)
    : directory_(directory),
      open_(std::move(open)),
      published_(std::move(published)) {}

absl::StatusOr<uint64_t> ShardMapPublisher::Publish(
    uint32_t group_id, const std::vector<uint64_t>& voters,
    absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  while (true) {
    absl::StatusOr<uint64_t> epoch = PublishOnce(
        group_id, voters, std::min(absl::Seconds(10), deadline - absl::Now()));
    if (epoch.ok()) {
      if (published_) published_(*epoch);
      return epoch;
    }
    last = epoch.status();
    if (!Retryable(last)) return last;
    if (absl::Now() >= deadline) break;
    LogWarning("shard map: writing group ", group_id,
               "'s replicas: ", last.message(), " (trying again)");
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::UnavailableError(
      absl::StrCat("the shard map was not updated with group ", group_id,
                   "'s replicas (last: ", last.message(), ")"));
}

absl::StatusOr<uint64_t> ShardMapPublisher::PublishOnce(
    uint32_t group_id, const std::vector<uint64_t>& voters,
    absl::Duration timeout) const {
  ReplicatedStore* meta = directory_->Hosted(0);
  if (meta != nullptr &&
      meta->GetClusterStatus().consensus.role == Role::kLeader) {
    return SetGroupReplicasOn(*meta, directory_->layout(), group_id, voters,
                              timeout);
  }
  std::vector<NodeAt> candidates;
  for (uint64_t id : directory_->ReplicasOf(0)) {
    candidates.push_back({id, directory_->ClientAddress(id)});
  }
  for (const ClusterNode& peer : directory_->peers()) {
    candidates.push_back({peer.id, peer.client_address});
  }
  absl::StatusOr<v1::ClusterStatusResponse> leader =
      FindGroupLeader(open_, candidates, 0, timeout);
  if (!leader.ok()) return leader.status();
  const std::string address = leader->leader_address().empty()
                                  ? directory_->ClientAddress(leader->node_id())
                                  : leader->leader_address();
  v1::SetGroupReplicasRequest request;
  request.set_group_id(group_id);
  for (uint64_t id : voters) request.add_replicas(id);
  v1::SetGroupReplicasResponse response;
  absl::Status s =
      CallPeer(open_, address, &v1::Cluster::Stub::SetGroupReplicas, request,
               &response, timeout);
  if (!s.ok()) return s;
  return response.epoch();
}

}  // namespace dedup
