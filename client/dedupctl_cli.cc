#include "client/dedupctl_cli.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/dedupctl_format.h"
#include "client/dedupctl_shards.h"

namespace dedup::ctl {

const char kSynopsis[] =
    R"(usage: dedupctl [--address=HOST:PORT[,HOST:PORT...]] [--deadline_ms=N]
                [--follow_leader=false] [--tls_ca_file=PEM] [--token_file=F]
                [--tls_cert_file=PEM --tls_key_file=PEM] [-o text|json]
                COMMAND ARGS...

commands:
  begin NS KEY [--args_hash_hex=HEX] [--owner=ID] [--lease_ms=N]
               [--ttl_s=N] [--wait_ms=N] [--accept_rerun]
  complete NS KEY FENCE [--outcome=success|error] [--result=STRING]
               [--ttl_s=N]
  release NS KEY FENCE
  renew NS KEY FENCE [--lease_ms=N]
  checkpoint NS KEY FENCE --step=NAME [--data=STRING] [--lease_ms=N]
  get NS KEY
  forget NS KEY
  stats                      the server's key figures (admin)
  compact                    compact now, dropping expired records (admin)
  policy NS                  the defaults and limits in force for NS (admin)
  reload-policy              read the server's --policy_file again (admin)
  backup DIR                 write a consistent copy of a running node's data
                             into DIR on this machine (admin)
  cluster status [--group=G] one row per node of the group (default 0)
  cluster add ID RAFT_ADDR CLIENT_ADDR [--group=G]
                             add a node (a voter once it has caught up)
  cluster remove ID [--group=G]
                             remove a node from the group
  cluster transfer [ID] [--group=G]
                             hand leadership to node ID (default: any)
  cluster move --group=G --from=N --to=M
                             move group G's replica from node N to node M
                             (M catches up from G's state only; N's copy is
                             deleted); prints each step
  cluster recover            status, then which node to recover a group
                             that lost its majority from, and the steps
  cluster shards             the shard map: groups, slot ranges, replicas,
                             leaders and the map's epoch
  cluster nodes              per node: groups hosted, groups led and their
                             members' lag
)";

namespace {

constexpr char kDetails[] =
    R"(
flags:
  --address      server address, or a comma-separated list of the nodes of
                 a group (default 127.0.0.1:50051). Calls go to the first;
                 a follower naming the leader (dedup-leader) is followed at
                 once, other UNAVAILABLEs move to the next address
  --deadline_ms  per-attempt deadline in ms (default 5000; begin adds
                 --wait_ms); UNAVAILABLE is retried with backoff (5 attempts
                 for one address, 10 for several)
  --tls_ca_file  PEM CA that signed the server's certificate: TLS on
  --tls_cert_file, --tls_key_file  client certificate and key (mTLS)
  --tls_server_name  name expected in the server's certificate (default:
                 the host of --address)
  --token_file   file holding a bearer token sent with every call (tenants)
  -o, --output   text (default) or json: one JSON document per command on
                 stdout (the proto3 JSON mapping of the answer: lowerCamelCase
                 names, enums by name, 64-bit integers as strings, bytes as
                 base64, every field present); errors as one object
                 {"error":{"code":"NOT_FOUND","message":"..."}} on stderr;
                 exit codes as in text
  --follow_leader=false  one attempt at the first --address only: no
                 redirect, no retry (a follower answers exit 2), e.g. for a
                 hook that should act only if this node is the leader
  --args_hash_hex  digest of the operation's arguments, hex
  --owner        attempt id for re-entrant begin (default: anonymous)
  --lease_ms, --ttl_s, --wait_ms  0 or absent: server default / no wait
  --outcome      success (default) or error
  --result       bytes to replay to duplicates

environment (a flag given on the command line wins):
  DEDUP_ADDRESS     default of --address (comma-separated list allowed)
  DEDUP_TOKEN_FILE  default of --token_file
  DEDUP_CA_FILE     default of --tls_ca_file
  DEDUP_CERT_FILE   default of --tls_cert_file
  DEDUP_KEY_FILE    default of --tls_key_file

output: one "field: value" line per field; timestamps are UTC ISO-8601 with
milliseconds followed by Unix ms; bytes that are not printable ASCII are
shown as FIELD_hex.

unknown outcomes (cluster mode): an operation the leader could not confirm
(ABORTED, dedup-outcome: unknown) is retried the safe way (begin only with
--owner); if that does not settle it, dedupctl reports "outcome unknown"
(exit 2): it may or may not have taken effect.

cluster commands (dedup.v1.Cluster, cluster mode only):
  status    asks every --address, and every member the first node to answer
            lists (by client address), one row each: ID ADDRESS ROLE TERM
            COMMIT APPLIED MATCH LAG LEADER. MATCH and LAG are the leader's
            view (log index stored on the node, entries behind), "-" without
            a reachable leader; LEADER is the leader id the node knows;
            LOG_TERM and LOG_INDEX locate the last entry of the node's log
            (higher LOG_TERM, then higher LOG_INDEX: more up to date).
  recover   the status table, then, when no node knows a leader, the most
            up-to-date reachable node and the steps to restart the group from
            it (dedupd --recover_as_sole_voter); exit 3 when the group has a
            leader (it is not lost).
  add, remove, transfer
            go to the leader (following dedup-leader) and wait until done
            (add: until the node is a voter); each prints one line
            (added: ID, removed: ID, leader_id: ID).
  move      asks the first --address (any node) to move group G's replica
            from node N to node M, keeping the replication factor: M hosts
            an empty replica, the leader adds it as a learner that catches up
            from a checkpoint of G only, promotes it to voter, hands
            leadership away from N if N leads, removes N, and N deletes its
            copy. Prints one "step: ..." line per step taken, then
            "replicas: IDS" (-o json: the MoveReplicaResponse). Waits up to
            30 minutes; run it again after a failure to resume (steps
            already done are skipped). Exit 2 with FAILED_PRECONDITION when
            the move does not apply (N hosts no replica of G, M already
            does, the group's voters are not its replication factor).
  shards    the shard map from the first --address that gives it: "epoch: E",
            then GROUP SLOTS ([first,end)) REPLICAS (node ids) LEADER
            LEADER_ADDRESS; -o json: the ShardMapResponse.
  nodes     per node of the map: NODE ADDRESS HOSTED LEADS LAG, LAG per led
            group as gG(nID=LAG,...) from that node's status of the group;
            -o json: {"epoch","nodes":[{"nodeId","clientAddress",
            "hostedGroups","ledGroups":[{"groupId","members"|"error"}]}]}.
stats and compact ask the first --address (they are per node).
backup asks the --address entries in order until one makes the copy (in
cluster mode only the leader does); DIR must be new or empty, and holds the
files and dedup-backup.json (written last) when done; restore it with
dedupd --restore_from=DIR. It prints dir, address, mode, node_id,
applied_index, term, files, bytes, estimated_records and created_at.

exit codes:
  0   the call got an answer (any begin status, get with found: false, ...)
  2   gRPC error (message on stderr); cluster status: a node did not answer
  3   complete/release/renew answered STALE_FENCE, NOT_FOUND or
      ALREADY_COMPLETED; cluster recover: the group has a leader
  64  usage error
)";

}  // namespace

std::string HelpText() {
  return absl::StrCat("dedupctl: talk to a dedup idempotency authority.\n\n",
                      kSynopsis, kDetails);
}

namespace {

struct CommandSpec {
  Command command;
  const char* name;
  bool takes_key;  // NS KEY
  bool takes_fence;
};

constexpr CommandSpec kCommands[] = {
    {Command::kBegin, "begin", true, false},
    {Command::kComplete, "complete", true, true},
    {Command::kRelease, "release", true, true},
    {Command::kRenew, "renew", true, true},
    {Command::kCheckpoint, "checkpoint", true, true},
    {Command::kGet, "get", true, false},
    {Command::kForget, "forget", true, false},
    {Command::kStats, "stats", false, false},
    {Command::kCompact, "compact", false, false},
    {Command::kReloadPolicy, "reload-policy", false, false},
};

absl::StatusOr<uint64_t> ParseNodeId(const std::string& text) {
  uint64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ID must be a positive integer, not '", text, "'"));
  }
  return id;
}

// cluster SUBCOMMAND [ARGS]; `args` starts at "cluster".
absl::StatusOr<Invocation> ParseCluster(const std::vector<std::string>& args) {
  if (args.size() < 2) {
    return absl::InvalidArgumentError(
        "'cluster' takes a subcommand: status, add, remove, transfer, "
        "move, recover, shards or nodes");
  }
  const std::string& sub = args[1];
  const size_t extra = args.size() - 2;
  Invocation inv;
  if (sub == "status") {
    if (extra != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'cluster status' takes no arguments, got ", extra));
    }
    inv.command = Command::kClusterStatus;
    return inv;
  }
  if (sub == "recover") {
    if (extra != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'cluster recover' takes no arguments, got ", extra));
    }
    inv.command = Command::kClusterRecover;
    return inv;
  }
  if (sub == "add") {
    if (extra != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("'cluster add' takes ID RAFT_ADDR CLIENT_ADDR, got ",
                       extra, " argument(s)"));
    }
    absl::StatusOr<uint64_t> id = ParseNodeId(args[2]);
    if (!id.ok()) return id.status();
    if (args[3].empty() || args[4].empty()) {
      return absl::InvalidArgumentError(
          "'cluster add': RAFT_ADDR and CLIENT_ADDR must not be empty");
    }
    inv.command = Command::kClusterAdd;
    inv.node_id = *id;
    inv.raft_address = args[3];
    inv.client_address = args[4];
    return inv;
  }
  if (sub == "remove") {
    if (extra != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'cluster remove' takes ID, got ", extra, " argument(s)"));
    }
    absl::StatusOr<uint64_t> id = ParseNodeId(args[2]);
    if (!id.ok()) return id.status();
    inv.command = Command::kClusterRemove;
    inv.node_id = *id;
    return inv;
  }
  if (sub == "transfer") {
    if (extra > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'cluster transfer' takes at most ID, got ", extra, " arguments"));
    }
    inv.command = Command::kClusterTransfer;
    if (extra == 1) {
      absl::StatusOr<uint64_t> id = ParseNodeId(args[2]);
      if (!id.ok()) return id.status();
      inv.node_id = *id;
    }
    return inv;
  }
  if (sub == "move") {
    if (extra != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'cluster move' takes no arguments (--group, --from, --to), got ",
          extra));
    }
    inv.command = Command::kClusterMove;
    return inv;
  }
  if (auto shards = ParseShardsSubcommand(args)) return *std::move(shards);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown cluster subcommand '", sub,
      "' (status, add, remove, transfer, move, recover, shards or nodes)"));
}

// Names each flag that is set but not in `allowed`.
absl::Status CheckApplicable(const CommandFlags& flags,
                             const absl::flat_hash_set<std::string>& allowed,
                             const char* command) {
  const std::pair<const char*, bool> set[] = {
      {"args_hash_hex", flags.args_hash_hex.has_value()},
      {"owner", flags.owner.has_value()},
      {"lease_ms", flags.lease_ms.has_value()},
      {"ttl_s", flags.ttl_s.has_value()},
      {"wait_ms", flags.wait_ms.has_value()},
      {"outcome", flags.outcome.has_value()},
      {"result", flags.result.has_value()},
      {"step", flags.step.has_value()},
      {"data", flags.data.has_value()},
      {"accept_rerun", flags.accept_rerun.has_value()},
      {"group", flags.group.has_value()},
      {"from", flags.from.has_value()},
      {"to", flags.to.has_value()},
  };
  for (const auto& [name, given] : set) {
    if (given && !allowed.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " does not apply to '", command, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Outcome> ParseOutcome(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "success") return v1::SUCCESS;
  if (lower == "error") return v1::ERROR;
  return absl::InvalidArgumentError(
      absl::StrCat("--outcome must be success or error, not '", text, "'"));
}

}  // namespace

absl::StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args,
                                           const CommandFlags& flags) {
  if (args.empty()) return absl::InvalidArgumentError("missing COMMAND");
  if (args[0] == "cluster") {
    // Only --group applies to a cluster command (not to recover, which
    // looks at group 0 only).
    const bool recover = args.size() > 1 && args[1] == "recover";
    const bool move = args.size() > 1 && args[1] == "move";
    absl::flat_hash_set<std::string> allowed = {"group"};
    if (recover) allowed.clear();
    if (move) allowed = {"group", "from", "to"};
    if (absl::Status s = CheckApplicable(
            flags, allowed,
            recover ? "cluster recover" : (move ? "cluster move" : "cluster"));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Invocation> inv = ParseCluster(args);
    if (!inv.ok()) return inv;
    inv->group_id = flags.group.value_or(0);
    if (move) {
      if (!flags.group.has_value() || !flags.from.has_value() ||
          !flags.to.has_value() || *flags.from == 0 || *flags.to == 0) {
        return absl::InvalidArgumentError(
            "'cluster move' needs --group=G, --from=N and --to=M (node ids "
            "> 0)");
      }
      inv->from_node_id = *flags.from;
      inv->to_node_id = *flags.to;
    }
    return inv;
  }
  if (args[0] == "backup") {
    if (absl::Status s = CheckApplicable(flags, {}, "backup"); !s.ok()) {
      return s;
    }
    if (args.size() != 2 || args[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'backup' takes DIR, got ", args.size() - 1, " argument(s)"));
    }
    Invocation inv;
    inv.command = Command::kBackup;
    inv.dir = args[1];
    return inv;
  }
  if (args[0] == "policy") {
    if (absl::Status s = CheckApplicable(flags, {}, "policy"); !s.ok()) {
      return s;
    }
    if (args.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'policy' takes NS, got ", args.size() - 1, " argument(s)"));
    }
    Invocation inv;
    inv.command = Command::kPolicy;
    inv.ns = args[1];
    return inv;
  }
  const CommandSpec* spec = nullptr;
  for (const CommandSpec& candidate : kCommands) {
    if (args[0] == candidate.name) spec = &candidate;
  }
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", args[0], "'"));
  }
  const size_t want = !spec->takes_key ? 1 : spec->takes_fence ? 4 : 3;
  if (args.size() != want) {
    if (!spec->takes_key) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", spec->name, "' takes no arguments, got ", args.size() - 1));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "'", spec->name, "' takes NS KEY", spec->takes_fence ? " FENCE" : "",
        ", got ", args.size() - 1, " argument(s)"));
  }

  Invocation inv;
  inv.command = spec->command;
  if (spec->takes_key) {
    inv.ns = args[1];
    inv.key = args[2];
  }
  if (spec->takes_fence && !absl::SimpleAtoi(args[3], &inv.fence)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FENCE must be an unsigned integer, not '", args[3], "'"));
  }

  absl::flat_hash_set<std::string> allowed;
  switch (spec->command) {
    case Command::kBegin:
      allowed = {"args_hash_hex", "owner",   "lease_ms",
                 "ttl_s",         "wait_ms", "accept_rerun"};
      break;
    case Command::kComplete:
      allowed = {"outcome", "result", "ttl_s"};
      break;
    case Command::kRenew:
      allowed = {"lease_ms"};
      break;
    case Command::kCheckpoint:
      if (!flags.step.has_value()) {
        return absl::InvalidArgumentError("'checkpoint' needs --step=NAME");
      }
      allowed = {"step", "data", "lease_ms"};
      break;
    case Command::kRelease:
    case Command::kGet:
    case Command::kForget:
    case Command::kStats:
    case Command::kCompact:
    case Command::kPolicy:
    case Command::kReloadPolicy:
    case Command::kBackup:
    case Command::kClusterStatus:
    case Command::kClusterAdd:
    case Command::kClusterRemove:
    case Command::kClusterTransfer:
    case Command::kClusterMove:
    case Command::kClusterRecover:
    case Command::kClusterShards:
    case Command::kClusterNodes:
      break;
  }
  if (absl::Status s = CheckApplicable(flags, allowed, spec->name); !s.ok()) {
    return s;
  }

  if (flags.args_hash_hex.has_value()) {
    absl::StatusOr<std::string> bytes = ParseHex(*flags.args_hash_hex);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--args_hash_hex: ", bytes.status().message()));
    }
    inv.args_hash = *std::move(bytes);
  }
  inv.begin.owner = flags.owner.value_or("");
  inv.begin.lease_ms = flags.lease_ms.value_or(0);
  inv.begin.ttl_s = flags.ttl_s.value_or(0);
  inv.begin.wait_ms = flags.wait_ms.value_or(0);
  inv.begin.accept_rerun = flags.accept_rerun.value_or(false);
  inv.step = flags.step.value_or("");
  inv.data = flags.data.value_or("");
  if (flags.outcome.has_value()) {
    absl::StatusOr<v1::Outcome> outcome = ParseOutcome(*flags.outcome);
    if (!outcome.ok()) return outcome.status();
    inv.outcome = *outcome;
  }
  inv.result = flags.result.value_or("");
  inv.ttl_s = flags.ttl_s.value_or(0);
  inv.lease_ms = flags.lease_ms.value_or(0);
  return inv;
}

absl::StatusOr<std::vector<std::string>> ParseAddressList(
    const std::string& flag) {
  std::vector<std::string> addresses;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--address: empty entry in '", flag, "'"));
    }
    if (std::find(addresses.begin(), addresses.end(), entry) ==
        addresses.end()) {
      addresses.emplace_back(entry);
    }
  }
  return addresses;
}

bool FlagInArgs(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    if (absl::ConsumePrefix(&arg, name) && (arg.empty() || arg[0] == '=')) {
      return true;
    }
  }
  return false;
}

std::string FlagOrEnvironment(bool flag_given, const std::string& flag_value,
                              const std::string& env_value) {
  if (flag_given || env_value.empty()) return flag_value;
  return env_value;
}

bool IsHelpRequest(int argc, char** argv) {
  // A bare "help" counts only in command position, so a key named "help"
  // still works.
  if (argc > 1 && absl::string_view(argv[1]) == "help") return true;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace dedup::ctl
