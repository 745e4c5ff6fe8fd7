#include "tests/client/run_ctl.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

extern char** environ;

namespace dedup::testing {

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

CtlResult RunCtlWithEnvironment(const std::vector<std::string>& args,
                                std::vector<std::string> env);

CtlResult RunCtl(const std::vector<std::string>& args) {
  // Hermetic: a DEDUP_ADDRESS in the shell running the tests is ignored.
  return RunCtl(args, {});
}

CtlResult RunCtl(const std::vector<std::string>& args,
                 const std::vector<std::string>& env) {
  std::vector<std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry = *e;
    if (absl::StartsWith(entry, "DEDUP_")) continue;
    const absl::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& set : env) {
      replaced = replaced || absl::StartsWith(set, absl::StrCat(name, "="));
    }
    if (!replaced) merged.emplace_back(entry);
  }
  merged.insert(merged.end(), env.begin(), env.end());
  return RunCtlWithEnvironment(args, merged);
}

CtlResult RunCtlWithEnvironment(const std::vector<std::string>& args,
                                std::vector<std::string> env) {
  CtlResult result;
  char out_path[] = "/tmp/dedupctl-out-XXXXXX";
  char err_path[] = "/tmp/dedupctl-err-XXXXXX";
  const int out_fd = mkstemp(out_path);
  const int err_fd = mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return result;
  }
  std::vector<std::string> storage = {DEDUPCTL_BINARY};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  pid_t pid = -1;
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const int rc =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_fd);
  close(err_fd);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << rc;
  } else {
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  unlink(out_path);
  unlink(err_path);
  return result;
}

std::string Field(const std::string& output, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::ConsumePrefix(&line, name + ":")) {
      absl::ConsumePrefix(&line, " ");
      return std::string(line);
    }
  }
  return "";
}

}  // namespace dedup::testing
