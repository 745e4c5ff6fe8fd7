// Process supervision against a real dedupd: the sd_notify messages a
// Type=notify unit relies on (READY=1 only once the port answers, STOPPING=1
// on SIGTERM, WATCHDOG=1 keepalives when WATCHDOG_USEC asks), on a socket
// this test binds in place of systemd (not PID 1 here); and liveness kept
// apart from readiness: a node below its free-disk floor is NOT_SERVING for
// "" but SERVING for dedup.v1.Liveness, on every listener.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_harness.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using Clock = std::chrono::steady_clock;
namespace health = ::grpc::health::v1;

// A datagram socket standing in for systemd's notification socket: a path,
// or an abstract name when it starts with '@'. Like systemd, it learns each
// sender's pid from the kernel (SO_PASSCRED).
class NotifySocket {
 public:
  struct Message {
    std::string text;
    pid_t pid = 0;
  };

  explicit NotifySocket(std::string name) : name_(std::move(name)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') address.sun_path[0] = '\0';
    const socklen_t length =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    const int on = 1;
    bound_ = fd_ >= 0 &&
             bind(fd_, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
             setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    if (name_[0] == '/') unlink(name_.c_str());
  }

  bool bound() const { return bound_; }
  const std::string& name() const { return name_; }

  // The next message, or nullopt after `timeout`.
  std::optional<Message> Receive(std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = timeout.count() / 1000;
    tv.tv_usec = (timeout.count() % 1000) * 1000;
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buffer[4096];
    iovec iov{buffer, sizeof(buffer)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    msghdr header{};
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_, &header, 0);
    if (n < 0) return std::nullopt;
    Message message{std::string(buffer, n), 0};
    for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr;
         c = CMSG_NXTHDR(&header, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred credentials;
        std::memcpy(&credentials, CMSG_DATA(c), sizeof(credentials));
        message.pid = credentials.pid;
      }
    }
    return message;
  }

  // Messages until one has the line `line` (returned); every one seen is
  // appended to *seen. nullopt after `timeout` without it.
  std::optional<Message> ReceiveUntil(const std::string& line,
                                      std::chrono::milliseconds timeout,
                                      std::vector<std::string>* seen) {
    const Clock::time_point end = Clock::now() + timeout;
    while (Clock::now() < end) {
      std::optional<Message> message = Receive(MsUntil(end));
      if (!message.has_value()) return std::nullopt;
      seen->push_back(message->text);
      for (absl::string_view l : absl::StrSplit(message->text, '\n')) {
        if (l == line) return message;
      }
    }
    return std::nullopt;
  }

  static std::chrono::milliseconds MsUntil(Clock::time_point end) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(end -
                                                                 Clock::now()) +
           std::chrono::milliseconds(1);
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
};

// Sets environment variables for the children started meanwhile.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars)
      : vars_(std::move(vars)) {
    for (const auto& [name, value] : vars_)
      setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : vars_) unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

// Whether a TCP connection to HOST:PORT is accepted (by the kernel: the
// listener need not run).
bool Connects(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return false;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&in), sizeof(in)) == 0;
  close(fd);
  return ok;
}

health::HealthCheckResponse::ServingStatus HealthOf(
    const std::string& address, const std::string& service) {
  auto stub = health::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  health::HealthCheckRequest request;
  request.set_service(service);
  health::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  EXPECT_TRUE(s.ok()) << service << ": " << s.error_message();
  return response.status();
}

// An abstract socket name no other run uses.
std::string UniqueName(const std::string& prefix) {
  return absl::StrCat(prefix, getpid(), "-",
                      Clock::now().time_since_epoch().count());
}

// READY=1 only once the port answers: the server is frozen (SIGSTOP) the
// moment READY=1 arrives, and its port must accept connections then (the
// kernel accepts for a bound listener), its ready file be written. Then
// STOPPING=1 on SIGTERM, before the process exits.
TEST(SdNotifyTest, ReadyOnlyOnceThePortAnswersThenStoppingOnSigterm) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-sdnotify");
  ASSERT_TRUE(dir.ok()) << dir.status();
  NotifySocket notify(*dir + "/notify.sock");
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  const std::string address = absl::StrCat("127.0.0.1:", FreePort("127.0.0.1"));
  const std::string ready_file = *dir + "/ready.json";
  std::unique_ptr<ServerProcess> server;
  {
    ScopedEnv env({{"NOTIFY_SOCKET", notify.name()}});
    // Start returns only after the ready file: read the socket on the side,
    // as systemd does while the process starts.
    std::vector<std::string> seen;
    std::optional<NotifySocket::Message> ready;
    bool bound_at_ready = false;
    bool ready_file_at_ready = false;
    std::thread watcher([&] {
      ready = notify.ReceiveUntil("READY=1", std::chrono::seconds(20), &seen);
      if (!ready.has_value() || ready->pid <= 0) return;
      kill(ready->pid, SIGSTOP);
      bound_at_ready = Connects(address);
      ready_file_at_ready = std::filesystem::exists(ready_file);
      kill(ready->pid, SIGCONT);
    });
    absl::StatusOr<std::unique_ptr<ServerProcess>> started =
        ServerProcess::Start({"--address=" + address, "--metrics_address=",
                              "--ready_file=" + ready_file});
    watcher.join();
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    ASSERT_TRUE(ready.has_value())
        << "no READY=1; got: " << absl::StrJoin(seen, " | ");
    EXPECT_EQ(ready->pid, server->pid());
    EXPECT_TRUE(bound_at_ready) << "READY=1 before the port was bound";
    EXPECT_TRUE(ready_file_at_ready) << "READY=1 before the ready file";
    EXPECT_TRUE(absl::StrContains(ready->text, "STATUS=serving on " + address))
        << ready->text;
  }
  EXPECT_EQ(HealthOf(address, ""), health::HealthCheckResponse::SERVING);
  // No watchdog asked for: no keepalives.
  EXPECT_FALSE(notify.Receive(std::chrono::milliseconds(700)).has_value());

  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  std::vector<std::string> seen;
  std::optional<NotifySocket::Message> stopping =
      notify.ReceiveUntil("STOPPING=1", std::chrono::seconds(10), &seen);
  ASSERT_TRUE(stopping.has_value()) << absl::StrJoin(seen, " | ");
  EXPECT_EQ(stopping->pid, server->pid());
  ASSERT_TRUE(server->WaitForExit(std::chrono::seconds(30)));
  EXPECT_EQ(server->exit_code(), 0) << server->captured_stderr();
  std::filesystem::remove_all(*dir);
}

// With WATCHDOG_USEC (systemd's WatchdogSec=), keepalives every half of it;
// WATCHDOG_PID naming another process turns them off.
TEST(SdNotifyTest, WatchdogKeepalivesEveryHalfOfWatchdogUsec) {
  const std::string name = UniqueName("@dedup-watchdog-");
  NotifySocket notify(name);
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  std::unique_ptr<ServerProcess> server;
  {
    ScopedEnv env({{"NOTIFY_SOCKET", name}, {"WATCHDOG_USEC", "1000000"}});
    absl::StatusOr<std::unique_ptr<ServerProcess>> started =
        ServerProcess::Start({"--metrics_address="});
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
  }
  std::vector<std::string> seen;
  ASSERT_TRUE(notify.ReceiveUntil("READY=1", std::chrono::seconds(5), &seen)
                  .has_value());
  // Count keepalives over 3 s: one per 500 ms.
  int keepalives = 0;
  const Clock::time_point end = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < end) {
    std::optional<NotifySocket::Message> m =
        notify.Receive(NotifySocket::MsUntil(end));
    if (m.has_value() && m->text == "WATCHDOG=1") ++keepalives;
  }
  EXPECT_GE(keepalives, 5);
  EXPECT_LE(keepalives, 8);
  EXPECT_TRUE(server->Stop().ok());

  // Not ours to answer for.
  ScopedEnv env({{"NOTIFY_SOCKET", name},
                 {"WATCHDOG_USEC", "1000000"},
                 {"WATCHDOG_PID", "1"}});
  absl::StatusOr<std::unique_ptr<ServerProcess>> other =
      ServerProcess::Start({"--metrics_address="});
  ASSERT_TRUE(other.ok()) << other.status();
  seen.clear();
  ASSERT_TRUE(notify.ReceiveUntil("READY=1", std::chrono::seconds(5), &seen)
                  .has_value());
  EXPECT_FALSE(notify.Receive(std::chrono::milliseconds(1500)).has_value());
  EXPECT_TRUE((*other)->Stop().ok());
}

// Below its free-disk floor a node is not ready (it can only refuse
// writes) but alive: restarting it would not make room.
TEST(LivenessTest, BelowTheFreeDiskFloorNotReadyButAlive) {
  // A floor no disk here reaches: writes stop at once, nothing to fill.
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
      {"--min_free_disk_mb=1000000000",
       "--metrics_address=", "--health_address=127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string health_port = (*server)->ready().health_address;
  ASSERT_FALSE(health_port.empty());
  for (const std::string& address : {(*server)->address(), health_port}) {
    SCOPED_TRACE(address);
    const Clock::time_point start = Clock::now();
    while (HealthOf(address, "") != health::HealthCheckResponse::NOT_SERVING &&
           Clock::now() - start < std::chrono::seconds(5)) {
      SleepMs(50);
    }
    EXPECT_EQ(HealthOf(address, ""), health::HealthCheckResponse::NOT_SERVING);
    EXPECT_EQ(HealthOf(address, "dedup.v1.Dedup"),
              health::HealthCheckResponse::NOT_SERVING);
    EXPECT_EQ(HealthOf(address, "dedup.v1.Liveness"),
              health::HealthCheckResponse::SERVING);
  }
  // And stays alive while it waits for room (the store still answers).
  SleepMs(3000);
  EXPECT_EQ(HealthOf(health_port, "dedup.v1.Liveness"),
            health::HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthOf(health_port, ""),
            health::HealthCheckResponse::NOT_SERVING);
  // Stopping: every service NOT_SERVING (the gRPC health service's
  // shutdown), then gone.
  EXPECT_TRUE((*server)->Stop().ok()) << (*server)->captured_stderr();
}

// The same in a group: the member below its floor is not ready (it would
// refuse writes as leader, so it hands leadership on), yet alive: its
// consensus loop runs. The other members are both.
TEST(LivenessTest, AGroupMemberBelowItsFloorIsNotReadyButAlive) {
  ClusterHarness cluster(3, {"--metrics_address=", "--event_log=off",
                             "--health_address=127.0.0.1:0"});
  ASSERT_TRUE(cluster.Start(1, {"--min_free_disk_mb=1000000000"}).ok());
  ASSERT_TRUE(cluster.Start(2).ok());
  ASSERT_TRUE(cluster.Start(3).ok());
  ASSERT_TRUE(cluster.WaitForLeader().ok());
  const auto health_of = [&](int id) {
    return cluster.process(id)->ready().health_address;
  };
  const Clock::time_point start = Clock::now();
  while (HealthOf(health_of(1), "") !=
             health::HealthCheckResponse::NOT_SERVING &&
         Clock::now() - start < std::chrono::seconds(5)) {
    SleepMs(50);
  }
  EXPECT_EQ(HealthOf(health_of(1), ""),
            health::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HealthOf(health_of(1), "dedup.v1.Liveness"),
            health::HealthCheckResponse::SERVING);
  for (int id : {2, 3}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(HealthOf(health_of(id), ""),
              health::HealthCheckResponse::SERVING);
    EXPECT_EQ(HealthOf(health_of(id), "dedup.v1.Liveness"),
              health::HealthCheckResponse::SERVING);
  }
}

// The heartbeats are wired: with the wedge limit cut to 1.5 s (a test-only
// knob), a single node (probe reads through its store) and a group member
// (its consensus thread's ticks) stay alive for 5 s, below the disk floor
// too.
TEST(LivenessTest, TheHeartbeatMovesInBothModes) {
  ScopedEnv env(std::vector<std::pair<std::string, std::string>>{
      {"DEDUP_TEST_WEDGED_AFTER_MS", "1500"}});
  absl::StatusOr<std::unique_ptr<ServerProcess>> single = ServerProcess::Start(
      {"--min_free_disk_mb=1000000000", "--metrics_address="});
  ASSERT_TRUE(single.ok()) << single.status();
  ClusterHarness cluster(3, {"--metrics_address=", "--event_log=off",
                             "--health_address=127.0.0.1:0"});
  ASSERT_TRUE(cluster.StartAll().ok());
  ASSERT_TRUE(cluster.WaitForLeader().ok());
  const std::vector<std::string> addresses = {
      (*single)->address(), cluster.process(1)->ready().health_address,
      cluster.process(2)->ready().health_address};
  for (int i = 0; i < 10; ++i) {
    SleepMs(500);
    for (const std::string& address : addresses) {
      ASSERT_EQ(HealthOf(address, "dedup.v1.Liveness"),
                health::HealthCheckResponse::SERVING)
          << address << " after " << (i + 1) * 500 << " ms";
    }
  }
}

}  // namespace
}  // namespace dedup::testing
