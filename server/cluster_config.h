// Cluster mode's configuration, from flags (or a --flagfile holding them).
#ifndef DEDUP_SERVER_CLUSTER_CONFIG_H_
#define DEDUP_SERVER_CLUSTER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "replication/replicated_store.h"
#include "storage/store.h"

namespace dedup {

struct ClusterConfig {
  bool enabled = false;  // --node_id > 0
  ReplicatedStoreOptions store;
};

// Reads the cluster flags after absl::ParseCommandLine; `single` supplies
// the data directory and RocksDB tuning. Resolves host names in raft
// addresses to IPv4 literals (libraft 0.15 takes nothing else). Fails with
// INVALID_ARGUMENT naming the flag.
[[nodiscard]] absl::StatusOr<ClusterConfig> ClusterConfigFromFlags(
    const StoreOptions& single);

// Parses one --peers item, "ID=RAFT_HOST:PORT=CLIENT_HOST:PORT".
[[nodiscard]] absl::StatusOr<ClusterNode> ParsePeer(absl::string_view text);

// host:port with the host resolved to an IPv4 literal.
[[nodiscard]] absl::StatusOr<std::string> ResolveIpv4(
    absl::string_view host_port);

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_CONFIG_H_
