#include "server/cluster_config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/channel_security.h"
#include "replication/raft_consensus.h"
#include "server/checkpoint_fetch.h"
#include "server/peer_plane_config.h"
#include "storage/storage_key.h"

// The Raft flags default to RaftOptions' own defaults (explained there), so
// the two cannot drift apart. A temporary, not a static object: a flag's
// default may be made before other files' statics are.
#define DEDUP_RAFT_DEFAULT(field) (dedup::RaftOptions().field)

ABSL_FLAG(uint64_t, node_id, 0,
          "cluster mode: this node's id (> 0) in its replicated group; 0 (the "
          "default) runs a single node");
ABSL_FLAG(std::vector<std::string>, peers, {},
          "cluster mode: the group's founding members including this node, "
          "comma-separated ID=RAFT_HOST:PORT=CLIENT_HOST:PORT items (the "
          "client address is what followers name as the leader's)");
ABSL_FLAG(bool, join, false,
          "cluster mode: join an existing group (added with `dedupctl "
          "cluster add`) instead of founding one with --peers");
ABSL_FLAG(std::string, raft_address, "",
          "cluster mode: host:port this node serves Raft on (default: its "
          "--peers entry); with TLS on, peers authenticate each other with "
          "mTLS (and --peer_token_file with tenants)");
ABSL_FLAG(std::string, peer_token_file, "",
          "cluster mode with --tenants_file: file holding the bearer token "
          "this node sends to other nodes (its tenant needs the operator "
          "role: snapshot transfers copy the whole database)");
ABSL_FLAG(std::string, peer_tls_ca_file, "",
          "cluster mode with TLS: PEM CA that signed the other nodes' "
          "certificates (default: --tls_client_ca_file)");
ABSL_FLAG(uint32_t, election_timeout_ms,
          DEDUP_RAFT_DEFAULT(election_timeout_ms),
          "cluster mode: Raft election timeout (randomized up to 2x)");
ABSL_FLAG(uint32_t, heartbeat_timeout_ms,
          DEDUP_RAFT_DEFAULT(heartbeat_timeout_ms),
          "cluster mode: Raft heartbeat interval");
ABSL_FLAG(uint32_t, snapshot_threshold, DEDUP_RAFT_DEFAULT(snapshot_threshold),
          "cluster mode: log entries between snapshots (each pauses the "
          "group's applies for tens of ms; --raft_log_budget_mb lowers it "
          "when entries are large)");
ABSL_FLAG(uint32_t, snapshot_trailing, DEDUP_RAFT_DEFAULT(snapshot_trailing),
          "cluster mode: log entries kept behind a snapshot for lagging "
          "followers");
ABSL_FLAG(uint32_t, raft_log_budget_mb,
          static_cast<uint32_t>(DEDUP_RAFT_DEFAULT(log_budget_bytes) >> 20),
          "cluster mode: MiB of entries the Raft log may hold (in memory as "
          "well as on disk); large entries lower --snapshot_threshold and "
          "--snapshot_trailing to fit, down to 16 entries each");
ABSL_FLAG(uint32_t, raft_max_inflight_entries, 4,
          "cluster mode: log entries a group's leader has proposed and not "
          "yet applied (1-64); calls arriving meanwhile gather into the next "
          "entry, so fewer mean bigger entries and fewer log writes per "
          "call, more mean shorter waits");
ABSL_FLAG(uint32_t, raft_max_inflight_ops, 4096,
          "cluster mode: operations in the entries a group's leader has "
          "proposed and not yet applied (256-1000000; may be passed by its "
          "share per entry); a replica applies what one answer commits "
          "without a pause, so on a node short of CPU a larger bound makes "
          "pauses that followers take for a lost leader");
ABSL_FLAG(uint32_t, groups, 1,
          "cluster mode: Raft groups the 16384 slots are split between (each "
          "a contiguous range with --replication_factor replicas placed over "
          "the --peers founders); 1 (the default): one group of every "
          "founder. Every node must be started with the same value");
ABSL_FLAG(uint32_t, replication_factor, 0,
          "cluster mode with --groups > 1: replicas of each group, 1, 3 or 5 "
          "(at most the founders in --peers); default min(3, founders)");
ABSL_FLAG(uint32_t, checkpoint_fetch_stall_s, 10,
          "cluster mode: a node fetching another's state for a snapshot "
          "gives that source up after this many seconds without data, and "
          "tries the next member");
#undef DEDUP_RAFT_DEFAULT

namespace dedup {

absl::StatusOr<std::string> ResolveIpv4(absl::string_view host_port) {
  const size_t colon = host_port.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port == 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host_port, "' is not HOST:PORT"));
  }
  const std::string host(host_port.substr(0, colon));
  struct addrinfo hints {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (int rv = getaddrinfo(host.c_str(), nullptr, &hints, &found); rv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resolve '", host, "' to an IPv4 address: ", gai_strerror(rv)));
  }
  char text[INET_ADDRSTRLEN] = {};
  const auto* address = reinterpret_cast<sockaddr_in*>(found->ai_addr);
  inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text));
  freeaddrinfo(found);
  return absl::StrCat(text, ":", port);
}

absl::StatusOr<ClusterNode> ParsePeer(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '=');
  ClusterNode node;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &node.id) ||
      node.id == 0 || parts[1].empty() || parts[2].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not ID=RAFT_HOST:PORT=CLIENT_HOST:PORT (id > 0)"));
  }
  absl::StatusOr<std::string> raft = ResolveIpv4(parts[1]);
  if (!raft.ok()) return raft.status();
  node.raft_address = *raft;
  node.client_address = std::string(parts[2]);
  return node;
}

namespace {

// Channels to other nodes, secured as clients reach this one.
absl::StatusOr<ChannelFactory> PeerChannels(const SecurityConfig& security) {
  const std::string token_file = absl::GetFlag(FLAGS_peer_token_file);
  if (!security.tenants_file.empty() && token_file.empty()) {
    return absl::InvalidArgumentError(
        "--peer_token_file: needed with --tenants_file in cluster mode (nodes "
        "copy snapshots from each other with an operator's token)");
  }
  std::string ca_file = absl::GetFlag(FLAGS_peer_tls_ca_file);
  if (ca_file.empty()) ca_file = security.tls_client_ca_file;
  if (security.tls() && ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--peer_tls_ca_file: needed with TLS in cluster mode (the CA of the "
        "other nodes' certificates) unless --tls_client_ca_file is that CA");
  }
  absl::StatusOr<ChannelSecurity> peer = ChannelSecurityFromFiles(
      security.tls() ? ca_file : "", "", "", token_file);
  if (!peer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peer_token_file/--peer_tls_ca_file: ", peer.status().message()));
  }
  return SecureChannelFactory(*std::move(peer));
}

}  // namespace

namespace {

// --peers, in order, with no id twice.
absl::StatusOr<std::vector<ClusterNode>> PeersFromFlags() {
  std::vector<ClusterNode> peers;
  for (const std::string& peer : absl::GetFlag(FLAGS_peers)) {
    absl::StatusOr<ClusterNode> node = ParsePeer(peer);
    if (!node.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peers: ", node.status().message()));
    }
    for (const ClusterNode& seen : peers) {
      if (seen.id == node->id) {
        return absl::InvalidArgumentError(
            absl::StrCat("--peers: node id ", node->id, " appears twice"));
      }
    }
    peers.push_back(*std::move(node));
  }
  return peers;
}

const ClusterNode* FindNode(const std::vector<ClusterNode>& nodes,
                            uint64_t id) {
  for (const ClusterNode& node : nodes) {
    if (node.id == id) return &node;
  }
  return nullptr;
}

// --raft_address, else this node's --peers entry.
absl::StatusOr<std::string> RaftAddressFromFlags(
    uint64_t id, const std::vector<ClusterNode>& peers) {
  std::string raft_address = absl::GetFlag(FLAGS_raft_address);
  if (!raft_address.empty()) {
    absl::StatusOr<std::string> resolved = ResolveIpv4(raft_address);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--raft_address: ", resolved.status().message()));
    }
    return *resolved;
  }
  if (const ClusterNode* self = FindNode(peers, id)) return self->raft_address;
  return absl::InvalidArgumentError(absl::StrCat(
      "--raft_address: must be set when --peers has no entry for node ", id));
}

// --groups and --replication_factor: the groups' placement over the
// founders (--peers). One group keeps every founder as a voter, as before
// groups existed (a joining node has none).
absl::Status LayoutFromFlags(uint64_t id, ClusterConfig& config) {
  const uint32_t groups = absl::GetFlag(FLAGS_groups);
  if (groups == 0 || groups > kSlotCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("--groups: must be in [1, ", kSlotCount, "]"));
  }
  const bool join = absl::GetFlag(FLAGS_join);
  if (!join && FindNode(config.peers, id) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peers: must list this node (id ", id,
                     ") to found a group; use --join to be added to one"));
  }
  std::vector<uint64_t> founders;
  for (const ClusterNode& node : config.peers) founders.push_back(node.id);
  const uint32_t rf = absl::GetFlag(FLAGS_replication_factor);
  if (rf != 0 && rf != 1 && rf != 3 && rf != 5) {
    return absl::InvalidArgumentError(
        "--replication_factor: must be 1, 3 or 5");
  }
  if (rf > founders.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replication_factor: ", rf, " is more than the ",
                     founders.size(), " founders in --peers"));
  }
  config.group_count = groups;
  if (groups == 1) {
    GroupPlacement all{0, 0, kSlotCount,
                       join ? std::vector<uint64_t>{} : founders};
    config.layout.epoch = 1;
    config.layout.groups = {all};
    return absl::OkStatus();
  }
  if (join) {
    return absl::InvalidArgumentError(
        "--join: not yet supported with --groups > 1");
  }
  const uint32_t factor =
      rf != 0 ? rf
              : std::min<uint32_t>(3, static_cast<uint32_t>(founders.size()));
  absl::StatusOr<ShardLayout> layout =
      FoundingLayout(std::move(founders), groups, factor);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--groups/--replication_factor: ", layout.status().message()));
  }
  config.layout = *std::move(layout);
  return absl::OkStatus();
}

// Timeouts, snapshots and the log budget.
absl::Status RaftTuningFromFlags(RaftOptions& raft) {
  raft.election_timeout_ms = absl::GetFlag(FLAGS_election_timeout_ms);
  raft.heartbeat_timeout_ms = absl::GetFlag(FLAGS_heartbeat_timeout_ms);
  if (raft.heartbeat_timeout_ms == 0 ||
      raft.heartbeat_timeout_ms * 2 > raft.election_timeout_ms) {
    return absl::InvalidArgumentError(
        "--heartbeat_timeout_ms: must be > 0 and at most half of "
        "--election_timeout_ms");
  }
  raft.snapshot_threshold = absl::GetFlag(FLAGS_snapshot_threshold);
  raft.snapshot_trailing = absl::GetFlag(FLAGS_snapshot_trailing);
  if (raft.snapshot_threshold < 16) {
    return absl::InvalidArgumentError("--snapshot_threshold: must be >= 16");
  }
  const uint32_t log_budget_mb = absl::GetFlag(FLAGS_raft_log_budget_mb);
  if (log_budget_mb < 16) {
    return absl::InvalidArgumentError("--raft_log_budget_mb: must be >= 16");
  }
  raft.log_budget_bytes = uint64_t{log_budget_mb} << 20;
  return absl::OkStatus();
}

// Below about 4 MiB a RocksDB of ours cannot open: its empty per-slot
// memtable is already past its write buffer, which RocksDB 7.8 asserts on.
constexpr size_t kMinGroupMemoryBytes = 8 << 20;

// The replicated state's options, taken from the single-node ones where
// both modes share a flag; the memory budget is split between `hosted`
// groups, each getting at least kMinGroupMemoryBytes.
void StateFromSingle(const StoreOptions& single, size_t hosted,
                     ClusterStoreOptions& store) {
  store.state.memory_budget_bytes =
      std::max(single.memory_budget_bytes / hosted, kMinGroupMemoryBytes);
  // By default room to flush every memtable plus libraft's segments (8 MiB
  // each, up to three open) and headroom for RocksDB's own files.
  store.min_free_disk_bytes =
      single.min_free_disk_bytes >= 0
          ? static_cast<uint64_t>(single.min_free_disk_bytes)
          : single.memory_budget_bytes + (64 << 20);
  store.state.compaction_grace_ms = single.compaction_grace_ms;
  store.state.periodic_compaction_s = single.periodic_compaction_s;
  store.clock = single.clock;
}

// How a node installing a snapshot of `group_id` copies the state.
absl::StatusOr<FetchCheckpointFn> CheckpointFetcher(ChannelFactory open,
                                                    uint32_t group_id) {
  const uint32_t stall_s = absl::GetFlag(FLAGS_checkpoint_fetch_stall_s);
  if (stall_s == 0) {
    return absl::InvalidArgumentError(
        "--checkpoint_fetch_stall_s: must be > 0");
  }
  FetchLimits limits;
  limits.stall = absl::Seconds(stall_s);
  return [open = std::move(open), limits, group_id](
             const std::string& address, uint64_t min_applied_index,
             const std::string& dir, const std::atomic<bool>* cancelled) {
    return FetchCheckpoint(open, address, group_id, min_applied_index, dir,
                           limits, cancelled);
  };
}

// Group `group`'s store on this node: `tuning`'s Raft settings, its own
// directories, its replicas as founders and their client addresses.
// `join`: this node is not among the group's founding replicas; it starts
// empty and waits to be added (Cluster.AddNode / MoveReplica).
absl::StatusOr<ClusterStoreOptions> GroupOptions(const ClusterConfig& config,
                                                 const GroupPlacement& group,
                                                 const RaftOptions& tuning,
                                                 const StoreOptions& single,
                                                 size_t hosted, bool join) {
  ClusterStoreOptions store;
  store.raft = tuning;
  // Held calls wait out a transfer (libraft ends it within the election
  // timeout) and the election after it (up to twice the timeout): the
  // default 2 s, or 4 election timeouts when those are longer.
  store.max_transfer_hold_ms = std::max<int64_t>(
      store.max_transfer_hold_ms, 4 * int64_t{tuning.election_timeout_ms});
  const uint32_t inflight = absl::GetFlag(FLAGS_raft_max_inflight_entries);
  if (inflight < 1 || inflight > 64) {
    return absl::InvalidArgumentError(
        "--raft_max_inflight_entries: must be 1 to 64");
  }
  store.max_inflight_entries = static_cast<int>(inflight);
  const uint32_t inflight_ops = absl::GetFlag(FLAGS_raft_max_inflight_ops);
  if (inflight_ops < 256 || inflight_ops > 1'000'000) {
    return absl::InvalidArgumentError(
        "--raft_max_inflight_ops: must be 256 to 1000000");
  }
  store.max_inflight_ops = inflight_ops;
  store.raft.id = config.node_id;
  store.raft.raft_address = config.raft_address;
  store.raft.peer_plane = config.peer_plane;
  store.raft.group_id = group.id;
  store.group_id = group.id;
  const std::filesystem::path dir(GroupDir(single.path, group.id));
  store.raft.dir = (dir / "raft").string();
  store.state.path = (dir / "state").string();
  for (uint64_t replica : join ? std::vector<uint64_t>{} : group.replicas) {
    const ClusterNode* node = FindNode(config.peers, replica);
    store.raft.bootstrap.push_back({replica, node->raft_address});
  }
  // One group, or a joiner: every --peers entry (a joiner fetches its first
  // state from whichever of them leads; a joining node may list members
  // that are not founders).
  store.nodes = config.group_count == 1 || join ? config.peers
                                                : std::vector<ClusterNode>{};
  for (uint64_t replica : group.replicas) {
    if (config.group_count > 1 && !join) {
      store.nodes.push_back(*FindNode(config.peers, replica));
    }
  }
  store.node_id = config.node_id;
  store.log_dir = store.raft.dir;
  store.consensus = [raft = store.raft](StateMachine* machine) {
    return StartRaft(raft, machine);
  };
  StateFromSingle(single, std::max<size_t>(hosted, 1), store);
  absl::StatusOr<FetchCheckpointFn> fetch =
      CheckpointFetcher(config.open_peer, group.id);
  if (!fetch.ok()) return fetch.status();
  store.fetch_checkpoint = *std::move(fetch);
  return store;
}

bool Exists(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// The restart rule (ClusterConfig::groups): the founding layout's groups
// until the data dir is marked founded, then the groups with a raft dir.
std::vector<uint32_t> HostedAtStart(const ClusterConfig& config,
                                    const std::string& data_dir) {
  if (config.group_count == 1) return {0};
  if (!IsFounded(data_dir)) return config.layout.HostedBy(config.node_id);
  std::vector<uint32_t> hosted;
  for (const GroupPlacement& group : config.layout.groups) {
    const std::filesystem::path dir(GroupDir(data_dir, group.id));
    if (Exists(dir / "raft")) hosted.push_back(group.id);
  }
  return hosted;
}

bool IsFounder(const ClusterConfig& config, uint32_t group_id) {
  const GroupPlacement* group = config.layout.Find(group_id);
  return group != nullptr &&
         std::find(group->replicas.begin(), group->replicas.end(),
                   config.node_id) != group->replicas.end();
}

}  // namespace

bool IsFounded(const std::string& data_dir) {
  return Exists(std::filesystem::path(data_dir) / kFoundedMarker);
}

std::string GroupDir(const std::string& data_dir, uint32_t group_id) {
  const std::filesystem::path data(data_dir);
  if (group_id == 0) return data.string();
  return (data / "groups" / std::to_string(group_id)).string();
}

absl::StatusOr<ClusterConfig> ClusterConfigFromFlags(
    const StoreOptions& single, const SecurityConfig& security,
    const Authorizer* auth) {
  ClusterConfig config;
  const uint64_t id = absl::GetFlag(FLAGS_node_id);
  if (id == 0) {
    if (!absl::GetFlag(FLAGS_peers).empty() || absl::GetFlag(FLAGS_join)) {
      return absl::InvalidArgumentError(
          "--node_id: must be set (> 0) with --peers or --join");
    }
    return config;
  }
  config.enabled = true;
  config.node_id = id;
  absl::StatusOr<std::vector<ClusterNode>> peers = PeersFromFlags();
  if (!peers.ok()) return peers.status();
  config.peers = *std::move(peers);
  absl::StatusOr<std::string> raft_address =
      RaftAddressFromFlags(id, config.peers);
  if (!raft_address.ok()) return raft_address.status();
  config.raft_address = *std::move(raft_address);
  if (absl::Status s = LayoutFromFlags(id, config); !s.ok()) return s;
  RaftOptions tuning;
  if (absl::Status s = RaftTuningFromFlags(tuning); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<PeerPlane>> plane = PeerPlaneFromFlags(
      security, config.raft_address, tuning.log_budget_bytes, auth);
  if (!plane.ok()) return plane.status();
  config.peer_plane = *std::move(plane);
  absl::StatusOr<ChannelFactory> open_peer = PeerChannels(security);
  if (!open_peer.ok()) return open_peer.status();
  config.open_peer = *std::move(open_peer);
  // One group always runs here (a joining node is added to it later).
  const std::vector<uint32_t> hosted = HostedAtStart(config, single.path);
  // The hosted groups share a few loops (raft_consensus_shared_loop.h).
  std::vector<std::shared_ptr<RaftLoop>> loops(RaftLoopCount(hosted.size()));
  for (std::shared_ptr<RaftLoop>& loop : loops) {
    absl::StatusOr<std::shared_ptr<RaftLoop>> started = RaftLoop::Start();
    if (!started.ok()) return started.status();
    loop = *std::move(started);
  }
  for (size_t i = 0; i < hosted.size(); ++i) {
    const uint32_t g = hosted[i];
    tuning.loop = loops[i % loops.size()];
    // Once founded, no replica bootstraps again: each has its
    // configuration in its log, or waits for its leader's.
    absl::StatusOr<ClusterStoreOptions> group = GroupOptions(
        config, *config.layout.Find(g), tuning, single, hosted.size(),
        config.group_count > 1 &&
            (IsFounded(single.path) || !IsFounder(config, g)));
    if (!group.ok()) return group.status();
    config.groups.push_back(*std::move(group));
  }
  // Groups moved here later start as joiners; the budget is split as if
  // one more group were hosted.
  ClusterConfig base = config;
  base.groups.clear();
  // They run on the node's loops too, so they wake with the others.
  config.open_group =
      [base = std::move(base), tuning, single, loops, count = hosted.size()](
          uint32_t group_id) -> absl::StatusOr<ClusterStoreOptions> {
    const GroupPlacement* group = base.layout.Find(group_id);
    if (group == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", group_id, " is not in the layout"));
    }
    RaftOptions raft = tuning;
    if (!loops.empty()) raft.loop = loops[group_id % loops.size()];
    return GroupOptions(base, *group, raft, single, count + 1,
                        /*join=*/true);
  };
  return config;
}

}  // namespace dedup
