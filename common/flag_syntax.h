// Checks a command line against the registered absl flags without exiting.
// absl::ParseCommandLine exits with status 1 on an unknown flag or a bad
// value; our binaries promise their own exit codes for bad flags, so they call
// this first and exit with their code on error.
#ifndef DEDUP_COMMON_FLAG_SYNTAX_H_
#define DEDUP_COMMON_FLAG_SYNTAX_H_

#include "absl/status/status.h"

namespace dedup {

// INVALID_ARGUMENT naming the first unknown flag, missing value or value that
// does not parse. Positional arguments and absl's own usage flags (--help...)
// are accepted. Parsing a value may already set the flag; ParseCommandLine
// sets it again to the same value.
[[nodiscard]] absl::Status CheckFlagSyntax(int argc, char** argv);

}  // namespace dedup

#endif  // DEDUP_COMMON_FLAG_SYNTAX_H_
