#include "server/metrics_http_server.h"

#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "server/metrics_http_loop.h"

namespace dedup {
namespace {

struct HostPort {
  std::string host;  // empty: every interface
  std::string port;
};

// "host:port", "[v6]:port" or "port".
absl::StatusOr<HostPort> SplitAddress(const std::string& address) {
  HostPort out;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    out.port = address;
  } else {
    out.host = address.substr(0, colon);
    out.port = address.substr(colon + 1);
    if (out.host.size() >= 2 && out.host.front() == '[' &&
        out.host.back() == ']') {
      out.host = out.host.substr(1, out.host.size() - 2);
    }
  }
  int port = 0;
  if (!absl::SimpleAtoi(out.port, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError("expected host:port");
  }
  return out;
}

// A non-blocking listening socket bound to `address`, or the reason not.
absl::StatusOr<int> Listen(const std::string& address) {
  absl::StatusOr<HostPort> hp = SplitAddress(address);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(hp->host.empty() ? nullptr : hp->host.c_str(),
                             hp->port.c_str(), &hints, &found);
  if (rc != 0) return absl::InvalidArgumentError(gai_strerror(rc));
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(error);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, nullptr, 0, port,
                  sizeof(port), NI_NUMERICSERV) != 0) {
    return 0;
  }
  return std::atoi(port);
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(int port,
                                     std::unique_ptr<MetricsHttpLoop> loop)
    : port_(port), loop_(std::move(loop)) {
  thread_ = std::thread([this] {
    NameThisThread("dedup-metrics");
    loop_->Run();
  });
}

MetricsHttpServer::~MetricsHttpServer() {
  loop_->Stop();
  thread_.join();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, HttpHandler handler,
    prometheus::Registry& registry, MetricsHttpOptions options) {
  absl::StatusOr<int> listen_fd = Listen(address);
  if (!listen_fd.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ",
                                               address, ": ",
                                               listen_fd.status().message()));
  }
  absl::StatusOr<std::unique_ptr<MetricsHttpLoop>> loop =
      MetricsHttpLoop::Create(*listen_fd, std::move(handler), registry,
                              std::move(options));
  if (!loop.ok()) return loop.status();
  const int port = BoundPort(*listen_fd);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(port, *std::move(loop)));
}

}  // namespace dedup
