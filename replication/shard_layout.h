// Where a cluster's groups live: which slots each Raft group owns and which
// nodes hold its replicas (the data part of the shard map; leader hints are
// not part of it). Pure values and functions: no I/O, no threads.
#ifndef DEDUP_REPLICATION_SHARD_LAYOUT_H_
#define DEDUP_REPLICATION_SHARD_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup {

struct GroupPlacement {
  uint32_t id = 0;
  // The group owns slots [first_slot, end_slot).
  uint32_t first_slot = 0;
  uint32_t end_slot = 0;
  // Node ids, distinct; the first is the group's preferred leader.
  std::vector<uint64_t> replicas;

  bool Owns(uint32_t slot) const {
    return slot >= first_slot && slot < end_slot;
  }
  bool HasReplica(uint64_t node) const;
};

struct ShardLayout {
  // Rises with every change of ranges or replicas.
  uint64_t epoch = 0;
  // Ordered by first_slot, covering [0, kSlotCount) without gaps or
  // overlaps (ValidateLayout).
  std::vector<GroupPlacement> groups;

  // The group owning `slot`. Requires a valid layout and slot < kSlotCount.
  const GroupPlacement& GroupOfSlot(uint32_t slot) const;
  // The most replicas any group has (0 without groups): the replication
  // factor the layout was founded with.
  int ReplicationFactor() const;
  // The group with this id, or null.
  const GroupPlacement* Find(uint32_t group_id) const;
  // The ids of the groups `node` holds a replica of, ascending.
  std::vector<uint32_t> HostedBy(uint64_t node) const;
};

// The layout a new cluster starts with (epoch 1): `groups` contiguous
// ranges of equal size (group g owns [g*S/G, (g+1)*S/G), S = kSlotCount,
// ids 0..G-1). Groups are placed in id order over the founders (ascending
// ids): group g's preferred leader is a founder leading fewest groups so far
// (so none leads more than ceil(G/N)), its other rf-1 replicas the least
// loaded other founders (so none holds more than ceil(G*rf/N) + 1). Every node
// computes the same layout from the same flags. INVALID_ARGUMENT when founders
// is empty, holds 0 or a duplicate, groups is 0 or above kSlotCount, or
// replication_factor is not in [1, founders.size()].
[[nodiscard]] absl::StatusOr<ShardLayout> FoundingLayout(
    std::vector<uint64_t> founders, uint32_t groups,
    uint32_t replication_factor);

// OK for a layout whose groups cover the slot space in order without gaps
// or overlaps, with distinct group ids and each group at least one replica,
// none 0 or repeated; INVALID_ARGUMENT naming the first fault otherwise.
// Layouts that come from outside the process are checked before use.
[[nodiscard]] absl::Status ValidateLayout(const ShardLayout& layout);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_SHARD_LAYOUT_H_
