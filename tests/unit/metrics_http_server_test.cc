#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace dedup {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What arrives on `fd` until EOF, reset or `timeout_ms`; `*eof` says
// whether the server closed the connection.
std::string ReadUntilClosed(int fd, int timeout_ms, bool* eof) {
  std::string out;
  *eof = false;
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *eof = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

double Value(prometheus::Registry& registry, const std::string& family,
             const std::string& label_value) {
  for (const auto& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      if (label_value.empty() ||
          (!m.label.empty() && m.label[0].value == label_value)) {
        return family == "dedup_metrics_http_connections" ? m.gauge.value
                                                          : m.counter.value;
      }
    }
  }
  return -1;
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void Start(MetricsHttpOptions options) {
    auto server = MetricsHttpServer::Start(
        "127.0.0.1:0",
        [](const HttpRequest& r) {
          HttpResponse response;
          response.body = "path=" + r.path;
          return response;
        },
        registry_, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  prometheus::Registry registry_;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, ClosesIdleConnectionsAtTheIdleTimeout) {
  MetricsHttpOptions options;
  options.idle_timeout = absl::Milliseconds(300);
  Start(options);
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  bool eof = false;
  EXPECT_EQ(ReadUntilClosed(fd, 150, &eof), "");
  EXPECT_FALSE(eof) << "closed before the idle timeout";
  EXPECT_EQ(ReadUntilClosed(fd, 2000, &eof), "");
  EXPECT_TRUE(eof) << "still open 2 s after a 300 ms idle timeout";
  close(fd);
  EXPECT_EQ(Value(registry_, "dedup_metrics_http_connections_closed_total",
                  "idle_timeout"),
            1);
}

TEST_F(MetricsHttpServerTest, KeepsAnsweringAConnectionThatKeepsAsking) {
  MetricsHttpOptions options;
  options.idle_timeout = absl::Milliseconds(300);
  Start(options);
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 4; ++i) {  // 4 x 200 ms: past the idle timeout in all
    usleep(200'000);
    const std::string request = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    bool eof = false;
    const std::string answer = ReadUntilClosed(fd, 100, &eof);
    EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
    EXPECT_NE(answer.find("path=/x"), std::string::npos) << answer;
    EXPECT_FALSE(eof);
  }
  close(fd);
}

TEST_F(MetricsHttpServerTest, ANewConnectionEvictsTheLongestWaiting) {
  MetricsHttpOptions options;
  options.max_connections = 4;
  Start(options);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(Connect(server_->port()));
    usleep(20'000);  // accepted in this order
  }
  const int fresh = Connect(server_->port());
  const std::string request = "GET /m HTTP/1.1\r\nHost: a\r\n\r\n";
  ASSERT_EQ(send(fresh, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  bool eof = false;
  EXPECT_NE(ReadUntilClosed(fresh, 300, &eof).find(" 200 "), std::string::npos);
  ReadUntilClosed(fds[0], 300, &eof);
  EXPECT_TRUE(eof) << "the oldest idle connection was not evicted";
  ReadUntilClosed(fds[1], 100, &eof);
  EXPECT_FALSE(eof) << "more than one connection was evicted";
  EXPECT_EQ(Value(registry_, "dedup_metrics_http_connections_closed_total",
                  "evicted"),
            1);
  EXPECT_EQ(Value(registry_, "dedup_metrics_http_connections", ""), 4);
  for (int fd : fds) close(fd);
  close(fresh);
}

TEST_F(MetricsHttpServerTest, RefusesAnAddressItCannotBind) {
  prometheus::Registry registry;
  auto bad = MetricsHttpServer::Start(
      "no-port", [](const HttpRequest&) { return HttpResponse{}; }, registry);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  Start({});
  auto taken = MetricsHttpServer::Start(
      "127.0.0.1:" + std::to_string(server_->port()),
      [](const HttpRequest&) { return HttpResponse{}; }, registry);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dedup
