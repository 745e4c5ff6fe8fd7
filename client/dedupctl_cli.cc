#include "client/dedupctl_cli.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/dedupctl_format.h"

namespace dedup::ctl {

const char kSynopsis[] =
    R"(usage: dedupctl [--address=HOST:PORT] [--deadline_ms=N] COMMAND ARGS...

commands:
  begin NS KEY [--args_hash_hex=HEX] [--owner=ID] [--lease_ms=N]
               [--ttl_s=N] [--wait_ms=N]
  complete NS KEY FENCE [--outcome=success|error] [--result=STRING]
               [--ttl_s=N]
  release NS KEY FENCE
  renew NS KEY FENCE [--lease_ms=N]
  get NS KEY
  forget NS KEY
  stats                      the server's key figures (admin)
  compact                    compact now, dropping expired records (admin)
)";

namespace {

constexpr char kDetails[] =
    R"(
flags:
  --address      server address (default 127.0.0.1:50051)
  --deadline_ms  per-attempt deadline in ms (default 5000; begin adds
                 --wait_ms); UNAVAILABLE is retried with backoff
  --args_hash_hex  digest of the operation's arguments, hex
  --owner        attempt id for re-entrant begin (default: anonymous)
  --lease_ms, --ttl_s, --wait_ms  0 or absent: server default / no wait
  --outcome      success (default) or error
  --result       bytes to replay to duplicates

output: one "field: value" line per field; timestamps are UTC ISO-8601 with
milliseconds followed by Unix ms; bytes that are not printable ASCII are
shown as FIELD_hex.

exit codes:
  0   the call got an answer (any begin status, get with found: false, ...)
  2   gRPC error (message on stderr)
  3   complete/release/renew answered STALE_FENCE, NOT_FOUND or
      ALREADY_COMPLETED
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
    {Command::kGet, "get", true, false},
    {Command::kForget, "forget", true, false},
    {Command::kStats, "stats", false, false},
    {Command::kCompact, "compact", false, false},
};

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
      allowed = {"args_hash_hex", "owner", "lease_ms", "ttl_s", "wait_ms"};
      break;
    case Command::kComplete:
      allowed = {"outcome", "result", "ttl_s"};
      break;
    case Command::kRenew:
      allowed = {"lease_ms"};
      break;
    case Command::kRelease:
    case Command::kGet:
    case Command::kForget:
    case Command::kStats:
    case Command::kCompact:
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
