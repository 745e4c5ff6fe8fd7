// dedupd's --help: which flags it lists and the text above them.
#ifndef DEDUP_SERVER_USAGE_H_
#define DEDUP_SERVER_USAGE_H_

#include <string>

namespace dedup {

// The program usage message: what dedupd is and every exit code of
// common/exit_codes.h, one a line.
[[nodiscard]] std::string ProgramUsage();

// Makes --help list the flags defined under server/ (absl's default lists
// only a file named after the binary) and sets ProgramUsage(). Call once,
// before parsing the command line.
void ConfigureUsage();

}  // namespace dedup

#endif  // DEDUP_SERVER_USAGE_H_
