// Cluster mode's configuration, from flags (or a --flagfile holding them).
#ifndef DEDUP_SERVER_CLUSTER_CONFIG_H_
#define DEDUP_SERVER_CLUSTER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/channel_security.h"
#include "replication/raft_consensus.h"
#include "replication/replicated_store.h"
#include "replication/shard_layout.h"
#include "server/auth.h"
#include "server/security_config.h"
#include "storage/store.h"

namespace dedup {

// The store's options plus the Raft options its `consensus` factory starts
// the engine with (a copy: changing `raft` afterwards changes nothing), kept
// to say what this node runs as. Open takes the ReplicatedStoreOptions part.
struct ClusterStoreOptions : ReplicatedStoreOptions {
  RaftOptions raft;
};

struct ClusterConfig {
  bool enabled = false;  // --node_id > 0
  uint64_t node_id = 0;
  // --groups: how many Raft groups the cluster runs (1: one group of every
  // founder, exactly as before groups existed).
  uint32_t group_count = 1;
  // With group_count > 1: FoundingLayout of the founders (--peers), the
  // groups and --replication_factor. With 1: one group owning every slot
  // with the founders as replicas (none when joining).
  ShardLayout layout;
  // --peers as given (resolved), in order.
  std::vector<ClusterNode> peers;
  // The groups this node hosts at start, ascending by group id
  // (raft.group_id), each with its own directories and consensus, all on
  // `peer_plane`. With group_count 1: exactly one, group 0, in DATA/raft and
  // DATA/state.
  //
  // The restart rule (group_count > 1): until the data dir is marked
  // founded (kFoundedMarker, written once the founding replicas are open),
  // the node hosts the layout's groups of it, founders bootstrapping their
  // configuration. From then on it hosts exactly the groups whose raft
  // directory exists (GroupDir(g)/raft), whatever the layout says: a group
  // moved here is reopened, one moved away (its directories deleted) is
  // gone; none bootstraps again (each configuration is in its log, or comes
  // from the group's leader for a replica still joining).
  std::vector<ClusterStoreOptions> groups;
  // group_count > 1: the options of a replica of `group_id` opened while
  // serving (a replica moved here), as a joiner. INVALID_ARGUMENT: not in
  // the layout.
  std::function<absl::StatusOr<ClusterStoreOptions>(uint32_t group_id)>
      open_group;
  // The node's one Raft plane, shared by every hosted group.
  std::shared_ptr<PeerPlane> peer_plane;
  // host:port this node serves Raft on.
  std::string raft_address;
  // Opens channels to other nodes' client ports, secured as configured.
  ChannelFactory open_peer;
};

// The file in the data dir that marks it founded (--groups > 1): see the
// restart rule at ClusterConfig::groups.
inline constexpr char kFoundedMarker[] = "HOSTING";
[[nodiscard]] bool IsFounded(const std::string& data_dir);

// The directory holding group `group_id`'s raft/ and state/ inside the data
// dir: the data dir itself for group 0 (as before groups existed),
// DATA/groups/<id> for the others.
[[nodiscard]] std::string GroupDir(const std::string& data_dir,
                                   uint32_t group_id);

// Reads the cluster flags after absl::ParseCommandLine; `single` supplies
// the data directory and RocksDB tuning, `security` how this node's own
// calls to other nodes (snapshot transfers) are secured: with TLS on they
// use TLS (--peer_tls_ca_file, default --tls_client_ca_file), with tenants
// they send --peer_token_file's token (an operator's). The Raft peer plane
// (store.raft.peer_plane, peer_plane_config.h) checks other nodes with
// `auth` (not owned; stop the plane before it goes). Resolves host names in
// raft addresses to IPv4 literals (libraft 0.15 takes nothing else).
// --groups > 1 places the groups by FoundingLayout and splits the memory
// budget evenly between the hosted ones. Fails with INVALID_ARGUMENT naming
// the flag.
[[nodiscard]] absl::StatusOr<ClusterConfig> ClusterConfigFromFlags(
    const StoreOptions& single, const SecurityConfig& security,
    const Authorizer* auth);

// Parses one --peers item, "ID=RAFT_HOST:PORT=CLIENT_HOST:PORT".
[[nodiscard]] absl::StatusOr<ClusterNode> ParsePeer(absl::string_view text);

// host:port with the host resolved to an IPv4 literal.
[[nodiscard]] absl::StatusOr<std::string> ResolveIpv4(
    absl::string_view host_port);

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_CONFIG_H_
