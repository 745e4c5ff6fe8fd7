#include "replication/shard_layout.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "storage/storage_key.h"

namespace dedup {

bool GroupPlacement::HasReplica(uint64_t node) const {
  return std::find(replicas.begin(), replicas.end(), node) != replicas.end();
}

const GroupPlacement& ShardLayout::GroupOfSlot(uint32_t slot) const {
  // The last group starting at or before `slot`.
  auto it = std::upper_bound(
      groups.begin(), groups.end(), slot,
      [](uint32_t s, const GroupPlacement& g) { return s < g.first_slot; });
  return *(it - 1);
}

const GroupPlacement* ShardLayout::Find(uint32_t group_id) const {
  for (const GroupPlacement& group : groups) {
    if (group.id == group_id) return &group;
  }
  return nullptr;
}

std::vector<uint32_t> ShardLayout::HostedBy(uint64_t node) const {
  std::vector<uint32_t> ids;
  for (const GroupPlacement& group : groups) {
    if (group.HasReplica(node)) ids.push_back(group.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {

// The founder leading fewest groups so far, then holding fewest replicas,
// ties going to the first from `start` (mod N): no founder ever leads more
// than ceil(G/N) groups.
size_t Leader(const std::vector<uint32_t>& leads,
              const std::vector<uint32_t>& load, size_t start) {
  const size_t n = load.size();
  size_t best = start;
  for (size_t d = 1; d < n; ++d) {
    const size_t i = (start + d) % n;
    if (std::make_pair(leads[i], load[i]) <
        std::make_pair(leads[best], load[best])) {
      best = i;
    }
  }
  return best;
}

// The `count` least loaded founders other than `leader`, ties going to the
// nearest after it (mod N), so that every founder ends with about the same
// number of replicas whatever G and N.
std::vector<size_t> Followers(const std::vector<uint32_t>& load, size_t leader,
                              uint32_t count) {
  const size_t n = load.size();
  std::vector<size_t> others;
  for (size_t d = 1; d < n; ++d) others.push_back((leader + d) % n);
  std::stable_sort(others.begin(), others.end(),
                   [&](size_t a, size_t b) { return load[a] < load[b]; });
  others.resize(count);
  return others;
}

}  // namespace

absl::StatusOr<ShardLayout> FoundingLayout(std::vector<uint64_t> founders,
                                           uint32_t groups,
                                           uint32_t replication_factor) {
  std::sort(founders.begin(), founders.end());
  if (founders.empty() || founders.front() == 0 ||
      std::adjacent_find(founders.begin(), founders.end()) != founders.end()) {
    return absl::InvalidArgumentError(
        "founders: need at least one node, ids > 0 and distinct");
  }
  if (groups == 0 || groups > kSlotCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups: must be in [1, ", kSlotCount, "], not ", groups));
  }
  const size_t n = founders.size();
  if (replication_factor == 0 || replication_factor > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("replication factor: must be in [1, ", n,
                     "] (the founding nodes), not ", replication_factor));
  }
  ShardLayout layout;
  layout.epoch = 1;
  std::vector<uint32_t> load(n, 0);   // replicas placed per founder
  std::vector<uint32_t> leads(n, 0);  // preferred leaderships per founder
  for (uint32_t g = 0; g < groups; ++g) {
    GroupPlacement group;
    group.id = g;
    group.first_slot = static_cast<uint32_t>(uint64_t{g} * kSlotCount / groups);
    group.end_slot =
        static_cast<uint32_t>(uint64_t{g + 1} * kSlotCount / groups);
    const size_t leader = Leader(leads, load, g % n);
    ++leads[leader];
    group.replicas.push_back(founders[leader]);
    ++load[leader];
    for (size_t index : Followers(load, leader, replication_factor - 1)) {
      group.replicas.push_back(founders[index]);
      ++load[index];
    }
    layout.groups.push_back(std::move(group));
  }
  return layout;
}

int ShardLayout::ReplicationFactor() const {
  size_t most = 0;
  for (const GroupPlacement& group : groups) {
    most = std::max(most, group.replicas.size());
  }
  return static_cast<int>(most);
}

absl::Status ValidateLayout(const ShardLayout& layout) {
  if (layout.groups.empty()) {
    return absl::InvalidArgumentError("shard layout: no groups");
  }
  uint32_t next = 0;
  absl::flat_hash_set<uint32_t> ids;
  for (const GroupPlacement& group : layout.groups) {
    const std::string name = absl::StrCat("shard layout: group ", group.id);
    if (!ids.insert(group.id).second) {
      return absl::InvalidArgumentError(absl::StrCat(name, " appears twice"));
    }
    if (group.first_slot != next || group.end_slot <= group.first_slot ||
        group.end_slot > kSlotCount) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " owns [", group.first_slot, ", ", group.end_slot,
          "): the ranges must cover the slots in order from ", next));
    }
    next = group.end_slot;
    absl::flat_hash_set<uint64_t> nodes;
    for (uint64_t node : group.replicas) {
      if (node == 0 || !nodes.insert(node).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": replica ids must be > 0 and distinct"));
      }
    }
    if (nodes.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has no replica"));
    }
  }
  if (next != kSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard layout: slots [", next, ", ", kSlotCount, ") have no group"));
  }
  return absl::OkStatus();
}

}  // namespace dedup
