// The client addresses of a group's members, for leader hints and snapshot
// sources: the configured peers, then what the replicated state recorded
// (members added later, whose address every member learns through the log).
// Internal to replicated_store.cc.
//
// Thread safety: every method may be called from any thread.
#ifndef DEDUP_REPLICATION_MEMBER_DIRECTORY_H_
#define DEDUP_REPLICATION_MEMBER_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "replication/replicated_store.h"

namespace dedup {

class MemberDirectory {
 public:
  explicit MemberDirectory(std::vector<ClusterNode> configured)
      : configured_(std::move(configured)) {}

  // The configured peers' addresses, then `recorded` (id -> client address)
  // over them.
  void Reload(const std::map<uint64_t, std::string>& recorded);

  // UNAVAILABLE for a call this node cannot serve: naming `leader` and its
  // address (also as kLeaderAddressPayload) when known, else saying an
  // election is in progress.
  [[nodiscard]] absl::Status NotLeader(uint64_t leader) const;

  // Where to fetch a snapshot: its taker first, then every other member
  // but `self`.
  [[nodiscard]] std::vector<std::string> SnapshotSources(uint64_t taker,
                                                         uint64_t self) const;

  // Every member known, with its Raft address when configured here.
  [[nodiscard]] std::vector<ClusterNode> Nodes() const;

 private:
  const std::vector<ClusterNode> configured_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> client_address_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_MEMBER_DIRECTORY_H_
