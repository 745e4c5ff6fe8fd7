// What this build is: the project version (CMakeLists.txt's project()) and
// the git commit it was configured from, for --version, the build-info
// metric and the Admin Stats call.
#ifndef DEDUP_COMMON_VERSION_H_
#define DEDUP_COMMON_VERSION_H_

#include <string>

namespace dedup {

// "0.1.0".
const char* ProjectVersion();
// The commit's first 12 hex digits, or "unknown" outside a git checkout.
const char* GitSha();
// "<program> <version> (git <sha>)\n": what --version prints.
std::string VersionLine(const std::string& program);
// Makes --version print VersionLine(program) (Abseil's default is a line
// about NDEBUG). Call before absl::ParseCommandLine; keeps the rest of the
// usage configuration as set.
void SetVersionFlag(const std::string& program);

}  // namespace dedup

#endif  // DEDUP_COMMON_VERSION_H_
