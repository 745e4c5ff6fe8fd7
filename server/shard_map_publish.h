// Writing the shard map the meta group (group 0) stores: the founding
// layout once, then a group's new replicas after each change of its
// membership. Every write is a compare-and-set on the stored epoch
// (kSetShardMap): a writer reads the map, proposes it with one group's
// replicas replaced at epoch + 1, and reads again when another write moved
// the epoch meanwhile, so concurrent writers never lose each other's change.
#ifndef DEDUP_SERVER_SHARD_MAP_PUBLISH_H_
#define DEDUP_SERVER_SHARD_MAP_PUBLISH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel_security.h"
#include "replication/replicated_store.h"
#include "replication/shard_layout.h"
#include "server/group_directory.h"

namespace dedup {

// `map` with group `group_id`'s replicas set to `voters`, ordered as `map`
// had those it keeps (its first replica is the preferred leader) then the
// new ones, at `map`'s epoch + 1; `map` itself (same epoch) when that
// changes nothing. NOT_FOUND: no such group; INVALID_ARGUMENT: no voters,
// an id of 0 or a repeated one. Pure.
[[nodiscard]] absl::StatusOr<ShardLayout> WithGroupReplicas(
    const ShardLayout& map, uint32_t group_id,
    const std::vector<uint64_t>& voters);

// Stores `founding` in `meta` (group 0's replica, its leader) if no map is
// stored yet: a CAS from epoch 0 to founding.epoch. `done` as
// ReplicatedStore::ProposeShardMap's (FAILED_PRECONDITION once a map is
// stored: the stored map wins).
void ProposeFoundingMap(ReplicatedStore& meta, const ShardLayout& founding,
                        StoreCallback<bool> done);

// Sets `group_id`'s replicas to `voters` in `meta`'s stored map (the
// founding layout's when none is stored yet), reading again and retrying
// while other writes move the epoch, for at most `timeout`. Returns the
// stored epoch that lists them (nothing proposed when it already did).
// Errors: WithGroupReplicas's; a stored map that does not decode
// (DATA_LOSS); a write's refusals (UNAVAILABLE naming the leader off it,
// ABORTED outcome unknown); DEADLINE_EXCEEDED. Blocks: never on the
// consensus thread or a gRPC callback thread.
[[nodiscard]] absl::StatusOr<uint64_t> SetGroupReplicasOn(
    ReplicatedStore& meta, const ShardLayout& founding, uint32_t group_id,
    const std::vector<uint64_t>& voters, absl::Duration timeout);

// Writes a group's new replicas into the meta group from any node: on this
// node when it leads group 0, else through Cluster.SetGroupReplicas on group
// 0's leader (found as MoveReplica finds a group's leader). Thread-safe;
// `directory` is not owned and must outlive it.
class ShardMapPublisher {
 public:
  // `open`: channels to the other nodes' client ports with this node's peer
  // credentials. `published` (may be empty) is told each epoch written or
  // found, so this node's own copy can catch up at once; any thread.
  ShardMapPublisher(const GroupDirectory* directory, ChannelFactory open,
                    std::function<void(uint64_t epoch)> published);

  // The stored epoch listing `voters` as `group_id`'s replicas. Retries
  // leader changes and unknown outcomes (the write is idempotent) until
  // `timeout`; then UNAVAILABLE with the last error. Blocks: never on the
  // consensus thread or a gRPC callback thread.
  [[nodiscard]] absl::StatusOr<uint64_t> Publish(
      uint32_t group_id, const std::vector<uint64_t>& voters,
      absl::Duration timeout = absl::Seconds(30)) const;

 private:
  // One attempt through group 0's leader (local or remote).
  absl::StatusOr<uint64_t> PublishOnce(uint32_t group_id,
                                       const std::vector<uint64_t>& voters,
                                       absl::Duration timeout) const;

  const GroupDirectory* const directory_;
  const ChannelFactory open_;
  const std::function<void(uint64_t)> published_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SHARD_MAP_PUBLISH_H_
