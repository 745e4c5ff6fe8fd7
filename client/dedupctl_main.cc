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
#include "common/flag_syntax.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "Server address.");
ABSL_FLAG(int64_t, deadline_ms, 5000,
          "Per-attempt deadline in ms (begin adds --wait_ms).");
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
ABSL_FLAG(std::optional<std::string>, result, std::nullopt,
          "complete: bytes to replay to duplicates.");

namespace {

int UsageError(const std::string& message) {
  std::cerr << "dedupctl: " << message << "\n\n"
            << dedup::ctl::kSynopsis << "\nrun 'dedupctl --help' for more.\n";
  return dedup::ctl::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(dedup::ctl::HelpText());
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
  absl::StatusOr<dedup::ctl::Invocation> inv =
      dedup::ctl::ParseInvocation(args, flags);
  if (!inv.ok()) return UsageError(std::string(inv.status().message()));

  const int64_t deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  if (deadline_ms <= 0) return UsageError("--deadline_ms must be positive");
  dedup::ClientOptions options;
  options.deadline = absl::Milliseconds(deadline_ms);
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::GetFlag(FLAGS_address), grpc::InsecureChannelCredentials());
  const dedup::Client client(channel, options);
  const std::unique_ptr<dedup::v1::Admin::Stub> admin =
      dedup::v1::Admin::NewStub(channel);
  return dedup::ctl::RunInvocation(client, *admin, options.deadline, *inv,
                                   std::cout, std::cerr);
}
