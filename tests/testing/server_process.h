// Runs the real dedupd binary as a child process for tests. A ServerProcess
// owns its child (killed on destruction) and any temp data dir it created.
#ifndef DEDUP_TESTS_TESTING_SERVER_PROCESS_H_
#define DEDUP_TESTS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"

namespace dedup::testing {

// Path of the dedupd binary under test (from the build, overridable with the
// DEDUP_SERVER_BINARY environment variable).
[[nodiscard]] std::string ServerBinary();

// What a dedupd wrote to its --ready_file once serving (server/ready_file.h):
// every address the bound one.
struct ReadyFile {
  int64_t pid = 0;
  std::string mode;             // "single" or "cluster"
  std::string address;          // gRPC, "HOST:PORT"
  std::string metrics_address;  // "" without metrics
  std::string health_address;   // "" without --health_address
  std::string raft_address;     // "" in single mode
};

// A running dedupd. Start it from a thread that outlives it: the child is sent
// SIGKILL when the starting thread exits, so a crashed test leaves no orphan.
//
// With the environment variable DEDUP_TEST_CLUSTER set (and no --node_id in
// the flags), Start runs a replicated group of 3 instead: nodes on
// 127.0.0.1-3, each with the flags and its own dir under data_dir, and
// address() is the leader's. With DEDUP_TEST_CLUSTER=NxG (e.g. 6x12), N
// nodes on 127.0.0.1-N found G groups (--groups=G), Start waits until every
// group has a leader, and address() is node 1's (it forwards what it does not
// lead). So the same test runs against a single node, a group and a sharded
// cluster; pid() is then -1 (tests that signal the server do not run that
// way), Stop and Kill act on every node.
class ServerProcess {
 public:
  // Starts dedupd with --address=127.0.0.1:0 --data_dir=DIR
  // --ready_file=FILE followed by extra_flags (later flags win, so they may
  // override either). An empty data_dir means a fresh temp dir that this
  // object owns and deletes; keep the object alive while restarting other
  // servers on the same dir. FILE is in a temp dir of its own (owned and
  // deleted), unless extra_flags name one; either way a file already there
  // is deleted first and only one holding the child's pid counts. Waits up
  // to 20 s for that file, failing early with the output's tail if dedupd
  // exits (and, for a group, up to 20 s more for a leader).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> extra_flags = {}, std::string data_dir = "");

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess();

  // "HOST:PORT" from the ready file, for grpc::CreateChannel.
  std::string address() const { return address_; }
  int port() const { return port_; }
  // Port of the Prometheus /metrics endpoint; 0 when metrics are disabled.
  int metrics_port() const;
  // The ready file's contents (a group's: the leader's).
  const ReadyFile& ready() const { return ready_; }

  // Sends SIGTERM and waits up to 30 s (then SIGKILL). An error unless the
  // server exited with code 0. Calling it on an exited server only reports.
  [[nodiscard]] absl::Status Stop();
  // Sends SIGKILL and waits: a crash as far as the server can tell.
  void Kill();
  // Waits up to `timeout` for the server to exit by itself (e.g. after a
  // signal sent through pid()); true once it has, with exit_code() set.
  [[nodiscard]] bool WaitForExit(std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }

  const std::string& data_dir() const { return data_dir_; }
  // -1 while running; the exit status, or 128 + signal if killed by a signal.
  int exit_code() const { return exit_code_; }
  // Everything the server wrote to stdout and stderr so far.
  std::string captured_stderr() const;

 private:
  ServerProcess() = default;

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServerProcess>>
  StartGroup(const std::vector<std::string>& extra_flags, std::string data_dir);

  // Reads the child's output until EOF; runs on reader_.
  void ReadOutput(int fd);
  // Polls `path` until this child's ready file is there (up to 20 s); an
  // error if the child exits first or the file is broken.
  [[nodiscard]] absl::StatusOr<ReadyFile> WaitForReadyFile(
      const std::string& path);
  // Reaps the child, waiting at most `timeout`; false if it is still running.
  bool Reap(std::chrono::milliseconds timeout);
  void JoinReader();

  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string data_dir_;
  bool owns_data_dir_ = false;
  std::string ready_dir_;  // owned; "" when the test named the file
  ReadyFile ready_;
  std::string address_;
  int port_ = 0;
  std::thread reader_;
  // DEDUP_TEST_CLUSTER: the group's nodes (this object has no child then).
  std::vector<std::unique_ptr<ServerProcess>> members_;

  // Shared with reader_.
  mutable std::mutex mu_;
  std::string output_;  // Guarded by mu_.
};

// What a process that ran to its end left behind.
struct ProcessResult {
  // The exit status, or 128 + signal if killed by a signal.
  int exit_code = -1;
  // Its stdout and stderr, interleaved.
  std::string output;
  // True when it was still running at the timeout and got SIGKILL.
  bool timed_out = false;
};

// Runs `binary args...` to completion, killing it after `timeout`. For
// processes expected to exit on their own (e.g. dedupd refusing a locked dir).
[[nodiscard]] absl::StatusOr<ProcessResult> RunProcess(
    const std::string& binary, const std::vector<std::string>& args,
    std::chrono::milliseconds timeout = std::chrono::seconds(20));

// A TCP port free right now on `ip`, never one this process was given
// before (another process could still take it before it is bound; the odds
// are small on a test machine). Thread-safe.
[[nodiscard]] int FreePort(const std::string& ip);

// Creates a fresh directory under $TMPDIR (or /tmp); the caller removes it.
[[nodiscard]] absl::StatusOr<std::string> MakeTempDir(
    const std::string& prefix = "dedup-test");

// Opens the channels the test support uses to reach servers (the group
// start-up check here, the cluster harness and fixture). Insecure unless a
// test of a secured group sets another with SetTestChannelFactory, once,
// before it starts servers. Thread-safe.
using TestChannelFactory =
    std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;
void SetTestChannelFactory(TestChannelFactory factory);
[[nodiscard]] std::shared_ptr<grpc::Channel> TestChannel(
    const std::string& address);

// A stub on a fresh insecure channel to `address`. Channels made here do not
// share connections, so several stubs spread load over several connections.
[[nodiscard]] std::unique_ptr<dedup::v1::Dedup::Stub> NewStub(
    const std::string& address);

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_TESTING_SERVER_PROCESS_H_
