#include "server/shard_map_watch.h"

#include <utility>
#include <vector>

#include "common/log.h"
#include "common/thread_name.h"
#include "replication/shard_layout_codec.h"
#include "server/cluster_service_peers.h"
#include "server/shard_map_publish.h"

namespace dedup {

void ShardMapWake::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

bool ShardMapWake::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return notified_ || stopped_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&woken), timeout);
  notified_ = false;
  return !stopped_;
}

void ShardMapWake::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

absl::StatusOr<ShardLayout> LayoutOfShardMap(
    const v1::ShardMapResponse& response) {
  ShardLayout map;
  map.epoch = response.epoch();
  for (const v1::ShardGroup& group : response.groups()) {
    GroupPlacement placement;
    placement.id = group.group_id();
    placement.first_slot = group.first_slot();
    placement.end_slot = group.end_slot();
    for (const v1::ShardReplica& replica : group.replicas()) {
      placement.replicas.push_back(replica.node_id());
    }
    map.groups.push_back(std::move(placement));
  }
  if (absl::Status s = ValidateLayout(map); !s.ok()) return s;
  return map;
}

ShardMapWatch::ShardMapWatch(ShardMapWatchOptions options)
    : options_(std::move(options)) {
  if (options_.publish) {
    repair_ = std::make_unique<ShardMapRepair>(options_.publish);
  }
  Look(/*local_only=*/true);
  thread_ = std::thread([this] {
    NameThisThread("dedup-map-watch");
    Run();
  });
}

ShardMapWatch::~ShardMapWatch() {
  options_.wake->Stop();
  thread_.join();
}

void ShardMapWatch::Run() {
  while (options_.wake->Wait(options_.interval)) {
    Look(/*local_only=*/false);
    Repair();
  }
}

void ShardMapWatch::Repair() {
  if (repair_ == nullptr) return;
  std::optional<ShardLayout> adopted = options_.directory->Adopted();
  if (!adopted.has_value()) return;
  LedVoters led;
  for (const auto& [group_id, store] : options_.directory->hosted()) {
    const ConsensusStatus status = store->GetClusterStatus().consensus;
    if (status.role != Role::kLeader) continue;
    std::vector<uint64_t>& voters = led[group_id];
    for (const Member& member : status.members) {
      if (member.role == MemberRole::kVoter) voters.push_back(member.id);
    }
  }
  repair_->Look(*adopted, led);
}

void ShardMapWatch::Look(bool local_only) {
  if (ReplicatedStore* meta = options_.directory->Hosted(0)) {
    FromLocal(*meta);
  } else if (!local_only) {
    FromPeer();
  }
}

void ShardMapWatch::FromLocal(ReplicatedStore& meta) {
  absl::StatusOr<ReplicatedState::StoredShardMap> stored =
      meta.StoredShardMap();
  if (!stored.ok()) return;
  if (stored->epoch != 0) {
    absl::StatusOr<ShardLayout> map = DecodeShardLayout(stored->map);
    if (!map.ok()) {
      LogWarning("shard map: the stored map does not decode: ",
                 map.status().message());
      return;
    }
    if (options_.directory->Adopt(*std::move(map))) {
      LogInfo("shard map: epoch ", stored->epoch, " (from group 0's state)");
    }
    return;
  }
  // No map stored yet: group 0's leader founds it with the layout every
  // node computed from the same flags.
  const ShardLayout& founding = options_.directory->layout();
  if (meta.GetClusterStatus().consensus.role != Role::kLeader ||
      !ValidateLayout(founding).ok() || founding_->exchange(true)) {
    return;
  }
  ProposeFoundingMap(meta, founding,
                     [founding = founding_](absl::StatusOr<bool> stored) {
                       founding->store(false);
                       if (stored.ok()) LogInfo("shard map: founded");
                     });
}

void ShardMapWatch::FromPeer() {
  GroupDirectory& directory = *options_.directory;
  std::vector<std::string> addresses;
  for (uint64_t id : directory.ReplicasOf(0)) {
    if (id == directory.node_id()) continue;
    std::string address = directory.ClientAddress(id);
    if (!address.empty()) addresses.push_back(std::move(address));
  }
  for (size_t tried = 0; tried < addresses.size(); ++tried) {
    const std::string& address = addresses[next_peer_ % addresses.size()];
    v1::ShardMapResponse response;
    absl::Status s =
        CallPeer(options_.open, address, &v1::Cluster::Stub::ShardMap,
                 v1::ShardMapRequest(), &response, options_.call_timeout);
    absl::StatusOr<ShardLayout> map =
        s.ok() ? LayoutOfShardMap(response) : absl::StatusOr<ShardLayout>(s);
    // Rotates even after an answer: a replica behind the others is not
    // the only one asked.
    ++next_peer_;
    if (map.ok()) {
      if (directory.Adopt(*std::move(map))) {
        LogInfo("shard map: epoch ", response.epoch(), " (from ", address, ")");
      }
      return;
    }
  }
}

}  // namespace dedup
