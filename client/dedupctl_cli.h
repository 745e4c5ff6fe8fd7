// dedupctl's command line: usage text, exit codes, and turning flags plus
// positional arguments into a validated Invocation. No I/O, no RPCs.
#ifndef DEDUP_CLIENT_DEDUPCTL_CLI_H_
#define DEDUP_CLIENT_DEDUPCTL_CLI_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/dedup_client.h"
#include "client/dedupctl_output.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::ctl {

// Exit codes (sysexits.h style for usage).
inline constexpr int kExitOk = 0;  // The call got an answer.
// gRPC error; message on stderr. cluster status: some node did not answer
// (its row says unreachable).
inline constexpr int kExitRpcError = 2;
// Complete/Release/Renew answered STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED.
inline constexpr int kExitRejected = 3;
inline constexpr int kExitUsage = 64;  // Bad command line; usage on stderr.

// Usage line and commands, shown after a usage error.
extern const char kSynopsis[];
// The full --help text: synopsis, flags, output format and exit codes.
[[nodiscard]] std::string HelpText();

enum class Command {
  kBegin,
  kComplete,
  kRelease,
  kRenew,
  kCheckpoint,
  kGet,
  kForget,
  kStats,         // Admin: the server's key figures as a table.
  kCompact,       // Admin: compact now, dropping expired records.
  kPolicy,        // Admin: the policy in force for a namespace.
  kReloadPolicy,  // Admin: read --policy_file again.
  kBackup,        // Admin: stream a backup into a local directory.
  // dedup.v1.Cluster (cluster mode): a row per node; membership changes and
  // leadership transfer, sent to the leader.
  kClusterStatus,
  kClusterAdd,
  kClusterRemove,
  kClusterTransfer,
  kClusterRecover,
  // Moves a group's replica between nodes (Cluster.MoveReplica).
  kClusterMove,
  // Sharded clusters (dedupctl_shards.h): the shard map; the nodes.
  kClusterShards,
  kClusterNodes,
};

// The per-command flags as given; std::nullopt when not on the command line,
// so a flag that does not apply to the command can be rejected.
struct CommandFlags {
  std::optional<std::string> args_hash_hex;
  std::optional<std::string> owner;
  std::optional<uint32_t> lease_ms;
  std::optional<uint32_t> ttl_s;
  std::optional<uint32_t> wait_ms;
  std::optional<std::string> outcome;
  std::optional<std::string> result;
  std::optional<std::string> step;
  std::optional<std::string> data;
  std::optional<bool> accept_rerun;
  std::optional<uint32_t> group;  // cluster status, add, remove, transfer.
  std::optional<uint64_t> from;   // cluster move.
  std::optional<uint64_t> to;     // cluster move.
};

struct Invocation {
  Command command = Command::kGet;
  std::string ns;
  std::string key;
  uint64_t fence = 0;                 // complete, release, renew.
  std::string args_hash;              // begin: raw bytes.
  BeginOptions begin;                 // begin.
  v1::Outcome outcome = v1::SUCCESS;  // complete.
  std::string result;                 // complete.
  uint32_t ttl_s = 0;                 // complete.
  uint32_t lease_ms = 0;              // renew, checkpoint.
  std::string step;                   // checkpoint.
  std::string data;                   // checkpoint.
  uint64_t node_id = 0;               // cluster add, remove, transfer (0: any).
  std::string raft_address;           // cluster add.
  std::string client_address;         // cluster add.
  uint32_t group_id = 0;  // cluster status, add, remove, transfer (--group).
  uint64_t from_node_id = 0;                  // cluster move.
  uint64_t to_node_id = 0;                    // cluster move.
  std::string dir;                            // backup.
  OutputFormat output = OutputFormat::kText;  // -o / --output.
};

// `args` are the positional arguments after the program name:
// COMMAND NS KEY [FENCE], COMMAND alone for stats, compact and
// reload-policy, policy NS, backup DIR, or
// cluster SUBCOMMAND [ARGS] (status; add ID RAFT_ADDR CLIENT_ADDR; remove ID;
// transfer [ID]; move with --group, --from and --to).
// INVALID_ARGUMENT (with a message for the user) on any usage error.
[[nodiscard]] absl::StatusOr<Invocation> ParseInvocation(
    const std::vector<std::string>& args, const CommandFlags& flags);

// --address: one HOST:PORT or a comma-separated list of them (the nodes of a
// group), blanks around entries ignored, duplicates dropped. INVALID_ARGUMENT
// naming --address for an empty list or entry.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ParseAddressList(
    const std::string& flag);

// True when `argv` gives the flag `name` (-name or --name, with "=VALUE" or
// the next argument), before a "--".
[[nodiscard]] bool FlagInArgs(int argc, char** argv, absl::string_view name);

// A connection setting: the flag's value when given on the command line,
// else `env_value` when not empty (the DEDUP_* variable), else the flag's
// value (its default).
[[nodiscard]] std::string FlagOrEnvironment(bool flag_given,
                                            const std::string& flag_value,
                                            const std::string& env_value);

// True for the spellings of a plain help request, which dedupctl answers with
// HelpText() on stdout and kExitOk.
[[nodiscard]] bool IsHelpRequest(int argc, char** argv);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_CLI_H_
