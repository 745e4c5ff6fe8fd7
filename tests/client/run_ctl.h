// Runs the dedupctl binary (DEDUPCTL_BINARY, set by the test target) as a
// child process with stdout and stderr captured apart, for tests of its
// output and exit codes. Thread-compatible.
#ifndef DEDUP_TESTS_CLIENT_RUN_CTL_H_
#define DEDUP_TESTS_CLIENT_RUN_CTL_H_

#include <string>
#include <vector>

namespace dedup::testing {

struct CtlResult {
  int exit_code = -1;  // 128 + signal when killed by one.
  std::string out;
  std::string err;
};

// Runs dedupctl with `args` (after the program name) and waits for it, in
// this process's environment without its DEDUP_* variables.
CtlResult RunCtl(const std::vector<std::string>& args);

// The same, with this process's environment changed by `env` ("NAME=VALUE"
// replaces or adds NAME), every DEDUP_* variable not in `env` removed.
CtlResult RunCtl(const std::vector<std::string>& args,
                 const std::vector<std::string>& env);

// The value of "field: value" in dedupctl output, or "" if absent.
std::string Field(const std::string& output, const std::string& name);

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_CLIENT_RUN_CTL_H_
