// dedupctl: command-line client for the dedup authority. See HelpText() in
// dedupctl_cli.cc for commands, output format and exit codes.
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/dedup_client.h"
#include "client/dedupctl_cli.h"
#include "client/dedupctl_commands.h"
#include "client/leader_router.h"
#include "common/channel_security.h"
#include "common/flag_syntax.h"
#include "common/version.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051",
          "Server address, or a comma-separated list of a group's nodes "
          "(the leader is followed). Default: $DEDUP_ADDRESS if set.");
ABSL_FLAG(std::string, output, "text",
          "Output format: text, or json (one JSON document on stdout; errors "
          "as a JSON object on stderr).");
ABSL_FLAG(std::string, o, "", "Short for --output.");
ABSL_FLAG(bool, follow_leader, true,
          "false: one attempt at the first --address, no redirect to the "
          "leader and no retry.");
ABSL_FLAG(int64_t, deadline_ms, 5000,
          "Per-attempt deadline in ms (begin adds --wait_ms).");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that signed the server's certificate; turns TLS on. "
          "Default: $DEDUP_CA_FILE.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate (mTLS); with --tls_key_file. Default: "
          "$DEDUP_CERT_FILE.");
ABSL_FLAG(std::string, tls_key_file, "",
          "PEM key of --tls_cert_file. Default: $DEDUP_KEY_FILE.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate instead of the host of "
          "--address.");
ABSL_FLAG(std::string, token_file, "",
          "File holding a bearer token sent with every call (a file, not a "
          "flag value, so it does not show in the process list). Default: "
          "$DEDUP_TOKEN_FILE.");
ABSL_FLAG(std::optional<std::string>, args_hash_hex, std::nullopt,
          "begin: digest of the operation's arguments, hex.");
ABSL_FLAG(std::optional<std::string>, owner, std::nullopt,
          "begin: attempt id (re-entrant while its lease is live).");
ABSL_FLAG(std::optional<uint32_t>, lease_ms, std::nullopt,
          "begin, renew: lease length in ms (0: server default).");
ABSL_FLAG(std::optional<uint32_t>, ttl_s, std::nullopt,
          "begin, complete: record TTL in seconds (0: server default).");
ABSL_FLAG(std::optional<uint32_t>, wait_ms, std::nullopt,
          "begin: wait this long for another owner's outcome.");
ABSL_FLAG(std::optional<std::string>, outcome, std::nullopt,
          "complete: success (default) or error.");
ABSL_FLAG(std::optional<std::string>, step, std::nullopt,
          "checkpoint: the step name (required)");
ABSL_FLAG(std::optional<std::string>, data, std::nullopt,
          "checkpoint: the progress data (bytes of this string)");
ABSL_FLAG(bool, accept_rerun, false,
          "begin: run again an operation that completed and expired "
          "(instead of answering EXPIRED)");
ABSL_FLAG(std::optional<uint32_t>, group, std::nullopt,
          "cluster status/add/remove/transfer/move: the Raft group (--groups "
          "on the server), default 0.");
ABSL_FLAG(std::optional<uint64_t>, from, std::nullopt,
          "cluster move: the node whose replica moves (required)");
ABSL_FLAG(std::optional<uint64_t>, to, std::nullopt,
          "cluster move: the node that hosts the replica next (required)");
ABSL_FLAG(std::optional<std::string>, result, std::nullopt,
          "complete: bytes to replay to duplicates.");

namespace {

// Set once the command line asked for it (before parsing, from argv).
dedup::ctl::OutputFormat output_format = dedup::ctl::OutputFormat::kText;

int UsageError(const std::string& message) {
  if (output_format == dedup::ctl::OutputFormat::kJson) {
    return dedup::ctl::PrintError(output_format, std::cerr,
                                  absl::InvalidArgumentError(message),
                                  dedup::ctl::kExitUsage);
  }
  std::cerr << "dedupctl: " << message << "\n\n"
            << dedup::ctl::kSynopsis << "\nrun 'dedupctl --help' for more.\n";
  return dedup::ctl::kExitUsage;
}

// -o and --output, which must agree when both are given.
absl::StatusOr<dedup::ctl::OutputFormat> OutputFlag(bool output_given) {
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string o = absl::GetFlag(FLAGS_o);
  if (!o.empty() && output_given && o != output) {
    return absl::InvalidArgumentError("-o and --output disagree");
  }
  return dedup::ctl::ParseOutputFormat(o.empty() ? output : o);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(dedup::ctl::HelpText());
  dedup::SetVersionFlag("dedupctl");
  output_format = dedup::ctl::OutputFormatInArgs(argc, argv);
  if (dedup::ctl::IsHelpRequest(argc, argv)) {
    std::cout << dedup::ctl::HelpText();
    return dedup::ctl::kExitOk;
  }
  if (absl::Status s = dedup::CheckFlagSyntax(argc, argv); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> args(positional.begin() + 1, positional.end());

  dedup::ctl::CommandFlags flags;
  flags.args_hash_hex = absl::GetFlag(FLAGS_args_hash_hex);
  flags.owner = absl::GetFlag(FLAGS_owner);
  flags.lease_ms = absl::GetFlag(FLAGS_lease_ms);
  flags.ttl_s = absl::GetFlag(FLAGS_ttl_s);
  flags.wait_ms = absl::GetFlag(FLAGS_wait_ms);
  flags.outcome = absl::GetFlag(FLAGS_outcome);
  flags.result = absl::GetFlag(FLAGS_result);
  flags.step = absl::GetFlag(FLAGS_step);
  flags.data = absl::GetFlag(FLAGS_data);
  if (absl::GetFlag(FLAGS_accept_rerun)) flags.accept_rerun = true;
  flags.group = absl::GetFlag(FLAGS_group);
  flags.from = absl::GetFlag(FLAGS_from);
  flags.to = absl::GetFlag(FLAGS_to);
  absl::StatusOr<dedup::ctl::Invocation> inv =
      dedup::ctl::ParseInvocation(args, flags);
  if (!inv.ok()) return UsageError(std::string(inv.status().message()));
  absl::StatusOr<dedup::ctl::OutputFormat> format =
      OutputFlag(dedup::ctl::FlagInArgs(argc, argv, "output"));
  if (!format.ok()) return UsageError(std::string(format.status().message()));
  inv->output = output_format = *format;
  const dedup::ClientEnvironment env = dedup::ReadClientEnvironment();
  auto given = [&](const char* flag) {
    return dedup::ctl::FlagInArgs(argc, argv, flag);
  };

  const int64_t deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  if (deadline_ms <= 0) return UsageError("--deadline_ms must be positive");
  absl::StatusOr<std::vector<std::string>> addresses =
      dedup::ctl::ParseAddressList(dedup::ctl::FlagOrEnvironment(
          given("address"), absl::GetFlag(FLAGS_address), env.address));
  if (!addresses.ok()) {
    return UsageError(std::string(addresses.status().message()));
  }
  dedup::ClientOptions options;
  options.deadline = absl::Milliseconds(deadline_ms);
  absl::StatusOr<dedup::ChannelSecurity> security =
      dedup::ChannelSecurityFromFiles(
          dedup::ctl::FlagOrEnvironment(given("tls_ca_file"),
                                        absl::GetFlag(FLAGS_tls_ca_file),
                                        env.ca_file),
          dedup::ctl::FlagOrEnvironment(given("tls_cert_file"),
                                        absl::GetFlag(FLAGS_tls_cert_file),
                                        env.cert_file),
          dedup::ctl::FlagOrEnvironment(given("tls_key_file"),
                                        absl::GetFlag(FLAGS_tls_key_file),
                                        env.key_file),
          dedup::ctl::FlagOrEnvironment(given("token_file"),
                                        absl::GetFlag(FLAGS_token_file),
                                        env.token_file));
  if (!security.ok())
    return UsageError(std::string(security.status().message()));
  security->server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (!security->server_name.empty() && !security->tls) {
    return UsageError(
        "--tls_server_name needs --tls_ca_file (or DEDUP_CA_FILE)");
  }
  options.channel_factory = dedup::SecureChannelFactory(*std::move(security));
  if (!absl::GetFlag(FLAGS_follow_leader)) {
    options.max_leader_hops = 0;
    options.max_attempts = 1;
  }
  options = dedup::ResolveClientOptions(options, addresses->size());
  const dedup::Client client(*addresses, options);
  dedup::LeaderRouter cluster(*addresses, options.channel_factory);
  // Stats and compact are per node: they ask the first address.
  const std::unique_ptr<dedup::v1::Admin::Stub> admin =
      dedup::v1::Admin::NewStub(
          cluster.EndpointFor(addresses->front())->channel);
  return dedup::ctl::RunInvocation(client, *admin, cluster, options, *inv,
                                   std::cout, std::cerr);
}
