#include "common/version.h"

#include "absl/flags/usage_config.h"

namespace dedup {

const char* ProjectVersion() { return DEDUP_VERSION; }

const char* GitSha() { return DEDUP_GIT_SHA; }

std::string VersionLine(const std::string& program) {
  return program + " " + ProjectVersion() + " (git " + GitSha() + ")\n";
}

void SetVersionFlag(const std::string& program) {
  absl::FlagsUsageConfig config;
  config.version_string = [program] { return VersionLine(program); };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace dedup
