#include "server/usage.h"

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/version.h"

namespace dedup {

std::string ProgramUsage() {
  std::string usage =
      "the dedup idempotency authority (gRPC dedup.v1.Dedup).\n"
      "Exit codes:";
  for (const ExitCodeInfo& info : kExitCodes) {
    absl::StrAppend(&usage, "\n  ", info.code, " ", info.meaning);
  }
  return usage;
}

void ConfigureUsage() {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view path) {
    return absl::StrContains(path, "server/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] { return VersionLine("dedupd"); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(ProgramUsage());
}

}  // namespace dedup
