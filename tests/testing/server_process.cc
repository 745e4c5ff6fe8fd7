#include "tests/testing/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process_output.h"

namespace dedup::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kReadyFlag[] = "--ready_file=";
constexpr std::chrono::seconds kStopTimeout(30);

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

absl::Status ErrnoStatus(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Forks and execs argv[0] with stdout and stderr on a pipe whose read end is
// returned in *read_fd. Everything the child needs is prepared before fork,
// since only async-signal-safe calls are allowed between fork and exec in a
// multithreaded process.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args,
                            int* read_fd) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (dev_null < 0) {
    close(fds[0]);
    close(fds[1]);
    return ErrnoStatus("open /dev/null");
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    close(dev_null);
    return ErrnoStatus("fork");
  }
  if (pid == 0) {
    // No orphaned servers if the test process dies.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // The test process may block or ignore signals the server relies on.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGPIPE, &dfl, nullptr);
    dup2(dev_null, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(argv[0], argv.data());
    static constexpr char kMsg[] = "exec failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    _exit(127);
  }
  close(fds[1]);
  close(dev_null);
  *read_fd = fds[0];
  // scripts/sanitize names the test behind a report file (named by pid).
  std::fprintf(stderr, "[spawn] pid %d: %s\n", static_cast<int>(pid), argv[0]);
  return pid;
}

absl::Status CheckExecutable(const std::string& binary) {
  if (binary.empty()) {
    return absl::FailedPreconditionError(
        "no dedupd binary: set DEDUP_SERVER_BINARY");
  }
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("dedupd binary not executable: ", binary, " (",
                     std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

// Waits for pid for at most `timeout`; returns the decoded status or -1.
int WaitFor(pid_t pid, Clock::duration timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return DecodeWaitStatus(status);
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The port of "HOST:PORT"; 0 when there is none.
int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return 0;
  }
  return port;
}

// The ready file `pid` wrote at `path`; NotFound while there is none, or
// only an older process's (a restart on the same path).
absl::StatusOr<ReadyFile> ReadReadyFile(const std::string& path, pid_t pid) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    // Written by rename, so never partial: a broken file is a bug.
    return absl::InternalError(absl::StrCat(
        "ready file ", path, " is not a JSON object: ", text.str()));
  }
  if (json.value("pid", int64_t{0}) != pid) return absl::NotFoundError(path);
  ReadyFile ready;
  ready.pid = pid;
  ready.mode = json.value("mode", "");
  ready.address = json.value("address", "");
  ready.metrics_address = json.value("metrics_address", "");
  ready.health_address = json.value("health_address", "");
  ready.raft_address = json.value("raft_address", "");
  if (PortOf(ready.address) <= 0) {
    return absl::InternalError(absl::StrCat(
        "ready file ", path, " has no address:port: ", text.str()));
  }
  return ready;
}

// The path a test gave with its own --ready_file (the last one wins, as in
// dedupd), else "".
std::string ReadyFlagIn(const std::vector<std::string>& flags) {
  std::string path;
  for (const std::string& flag : flags) {
    if (absl::StartsWith(flag, kReadyFlag)) {
      path = flag.substr(sizeof(kReadyFlag) - 1);
    }
  }
  return path;
}

}  // namespace

std::string ServerBinary() {
  if (const char* env = std::getenv("DEDUP_SERVER_BINARY"); env && *env) {
    return env;
  }
#ifdef DEDUP_SERVER_BINARY
  return DEDUP_SERVER_BINARY;
#else
  return "";
#endif
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return ErrnoStatus(absl::StrCat("mkdtemp ", pattern));
  }
  return pattern;
}

int FreePort(const std::string& ip) {
  // The kernel hands out a port just released again soon: never give one
  // twice in this process (a node's client and Raft ports must differ).
  static std::mutex mu;
  static std::set<int>* const given = new std::set<int>();
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    const int port = ntohs(addr.sin_port);
    std::lock_guard<std::mutex> lock(mu);
    if (given->insert(port).second) return port;
  }
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    std::vector<std::string> extra_flags, std::string data_dir) {
  if (std::getenv("DEDUP_TEST_CLUSTER") != nullptr &&
      std::none_of(extra_flags.begin(), extra_flags.end(),
                   [](const std::string& flag) {
                     return absl::StartsWith(flag, "--node_id");
                   })) {
    return StartGroup(extra_flags, std::move(data_dir));
  }
  const std::string binary = ServerBinary();
  if (absl::Status s = CheckExecutable(binary); !s.ok()) return s;

  // Not make_unique: the constructor is private.
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  if (data_dir.empty()) {
    absl::StatusOr<std::string> dir = MakeTempDir("dedupd");
    if (!dir.ok()) return dir.status();
    data_dir = *std::move(dir);
    server->owns_data_dir_ = true;
  }
  server->data_dir_ = data_dir;

  // The ready file goes in a dir of its own, not in the data dir (whose
  // contents are dedupd's), unless the test names one.
  std::string ready_path = ReadyFlagIn(extra_flags);
  std::vector<std::string> ready_flag;
  if (ready_path.empty()) {
    absl::StatusOr<std::string> dir = MakeTempDir("dedupd-ready");
    if (!dir.ok()) return dir.status();
    server->ready_dir_ = *dir;
    ready_path = absl::StrCat(*dir, "/ready.json");
    ready_flag.push_back(absl::StrCat(kReadyFlag, ready_path));
  }
  // A file left by an earlier server on this path is not this one's.
  std::error_code ignored;
  std::filesystem::remove(ready_path, ignored);

  // Metrics off unless a test asks (--metrics_address=127.0.0.1:0): parallel
  // tests must not collide on 9464.
  std::vector<std::string> args = {
      binary, "--address=127.0.0.1:0",
      "--metrics_address=", absl::StrCat("--data_dir=", data_dir)};
  args.insert(args.end(), ready_flag.begin(), ready_flag.end());
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  int read_fd = -1;
  absl::StatusOr<pid_t> pid = Spawn(args, &read_fd);
  if (!pid.ok()) return pid.status();
  server->pid_ = *pid;
  server->reader_ =
      std::thread([s = server.get(), read_fd] { s->ReadOutput(read_fd); });

  absl::StatusOr<ReadyFile> ready = server->WaitForReadyFile(ready_path);
  if (!ready.ok()) {
    // It exited, hung or wrote a broken file: all start failures.
    const bool exited = server->Reap(std::chrono::seconds(2));
    if (!exited) server->Kill();
    server->JoinReader();
    return absl::UnavailableError(absl::StrCat(
        exited ? absl::StrCat("dedupd exited with code ", server->exit_code_)
               : ready.status().message(),
        "\ncommand: ", absl::StrJoin(args, " "), "\noutput:\n",
        OutputTail(server->captured_stderr())));
  }
  server->ready_ = *std::move(ready);
  server->address_ = server->ready_.address;
  server->port_ = PortOf(server->ready_.address);
  return server;
}

absl::StatusOr<ReadyFile> ServerProcess::WaitForReadyFile(
    const std::string& path) {
  const Clock::time_point deadline = Clock::now() + kServerStartTimeout;
  while (Clock::now() < deadline) {
    absl::StatusOr<ReadyFile> ready = ReadReadyFile(path, pid_);
    if (ready.ok() || !absl::IsNotFound(ready.status())) return ready;
    if (Reap(std::chrono::milliseconds(0))) {
      return absl::UnavailableError("dedupd exited before it was ready");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("dedupd wrote no ready file (", path, ") within 20 s"));
}

int ServerProcess::metrics_port() const {
  return PortOf(ready_.metrics_address);
}

ServerProcess::~ServerProcess() {
  Kill();
  std::error_code ignored;
  if (owns_data_dir_ && !data_dir_.empty()) {
    std::filesystem::remove_all(data_dir_, ignored);
  }
  if (!ready_dir_.empty()) std::filesystem::remove_all(ready_dir_, ignored);
}

void ServerProcess::ReadOutput(int fd) {
  std::string line;
  char buf[4096];
  auto flush_line = [&] {
    std::fprintf(stderr, "[dedupd] %s\n", line.c_str());
    line.clear();
  };
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      output_.append(buf, static_cast<size_t>(n));
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        flush_line();
      } else {
        line.push_back(buf[i]);
      }
    }
  }
  if (!line.empty()) flush_line();
  close(fd);
}

bool ServerProcess::Reap(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return true;
  if (exit_code_ >= 0) return true;
  const int code = WaitFor(pid_, timeout);
  if (code < 0) return false;
  exit_code_ = code;
  return true;
}

void ServerProcess::JoinReader() {
  if (reader_.joinable()) reader_.join();
}

absl::Status ServerProcess::Stop() {
  if (!members_.empty()) {
    // Followers first, so the leader does not hand over leadership while
    // the group goes away.
    absl::Status status;
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& member : members_) {
        if ((member->address() == address_) != (pass == 1)) continue;
        if (absl::Status s = member->Stop(); !s.ok() && status.ok()) {
          status = s;
        }
      }
    }
    return status;
  }
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGTERM);
    if (!Reap(kStopTimeout)) {
      Kill();
      return absl::DeadlineExceededError(
          absl::StrCat("dedupd did not exit within 30 s of SIGTERM; output:\n",
                       OutputTail(captured_stderr())));
    }
  }
  JoinReader();
  if (exit_code_ != 0) {
    return absl::InternalError(absl::StrCat("dedupd exited with code ",
                                            exit_code_, "; output:\n",
                                            OutputTail(captured_stderr())));
  }
  return absl::OkStatus();
}

void ServerProcess::Kill() {
  for (const auto& member : members_) member->Kill();
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGKILL);
    // SIGKILL cannot be ignored, so this wait ends.
    Reap(std::chrono::hours(1));
  }
  JoinReader();
}

bool ServerProcess::WaitForExit(std::chrono::milliseconds timeout) {
  if (!members_.empty()) {
    bool all = true;
    for (const auto& member : members_) all &= member->WaitForExit(timeout);
    return all;
  }
  if (!Reap(timeout)) return false;
  JoinReader();
  return true;
}

std::string ServerProcess::captured_stderr() const {
  if (!members_.empty()) {
    std::string out;
    for (size_t i = 0; i < members_.size(); ++i) {
      absl::StrAppend(&out, "--- node ", i + 1, " ---\n",
                      members_[i]->captured_stderr());
    }
    return out;
  }
  std::lock_guard<std::mutex> lock(mu_);
  return output_;
}

absl::StatusOr<ProcessResult> RunProcess(const std::string& binary,
                                         const std::vector<std::string>& args,
                                         std::chrono::milliseconds timeout) {
  if (absl::Status s = CheckExecutable(binary); !s.ok()) return s;
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  int fd = -1;
  absl::StatusOr<pid_t> pid = Spawn(argv, &fd);
  if (!pid.ok()) return pid.status();

  ProcessResult result;
  const Clock::time_point deadline = Clock::now() + timeout;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0 && !result.timed_out) {
      // Still running: kill it, then drain what is left of the pipe.
      result.timed_out = true;
      kill(*pid, SIGKILL);
    }
    pollfd pfd = {fd, POLLIN, 0};
    const int ready =
        poll(&pfd, 1, result.timed_out ? 1000 : static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (result.timed_out) break;  // Something else holds the pipe open.
      continue;
    }
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // EOF means it closed its output, which nearly always means it exited.
  int code = WaitFor(*pid, std::chrono::seconds(10));
  if (code < 0) {
    result.timed_out = true;
    kill(*pid, SIGKILL);
    code = WaitFor(*pid, std::chrono::hours(1));
  }
  result.exit_code = code;
  return result;
}

namespace {
std::mutex channel_factory_mu;
TestChannelFactory& channel_factory() {
  static auto* factory = new TestChannelFactory();
  return *factory;
}
}  // namespace

void SetTestChannelFactory(TestChannelFactory factory) {
  std::lock_guard<std::mutex> lock(channel_factory_mu);
  channel_factory() = std::move(factory);
}

std::shared_ptr<grpc::Channel> TestChannel(const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(channel_factory_mu);
    if (channel_factory()) return channel_factory()(address);
  }
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

std::unique_ptr<dedup::v1::Dedup::Stub> NewStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return dedup::v1::Dedup::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

}  // namespace dedup::testing
