#include "replication/peer_plane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace dedup {
namespace {

constexpr int kListenBacklog = 1024;
// Refusal lines per window; the rest are counted into the next line.
constexpr int kLogLinesPerWindow = 5;
constexpr absl::Duration kLogWindow = absl::Seconds(10);

[[nodiscard]] bool ParseIpv4(const std::string& host_port, sockaddr_in* out) {
  const size_t colon = host_port.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port > 65535) {
    return false;
  }
  *out = {};
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, host_port.substr(0, colon).c_str(),
                   &out->sin_addr) == 1;
}

// Non-blocking connect bounded by `timeout_ms`.
[[nodiscard]] bool ConnectWithin(int fd, const sockaddr_in& to,
                                 int timeout_ms) {
  SetBlocking(fd, false);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    if (errno != EINPROGRESS) return false;
    struct pollfd p {};
    p.fd = fd;
    p.events = POLLOUT;
    if (poll(&p, 1, timeout_ms) != 1) return false;
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      return false;
    }
  }
  SetBlocking(fd, true);
  return true;
}

}  // namespace

const char* HandshakeResultName(HandshakeResult result) {
  switch (result) {
    case HandshakeResult::kOk:
      return "ok";
    case HandshakeResult::kTlsFailed:
      return "tls_failed";
    case HandshakeResult::kBadHello:
      return "bad_hello";
    case HandshakeResult::kUnauthorized:
      return "unauthorized";
    case HandshakeResult::kTimeout:
      return "timeout";
    case HandshakeResult::kBusy:
      return "busy";
  }
  return "unknown";
}

void PeerGroup::SetMembers(std::vector<uint64_t> ids) {
  absl::MutexLock lock(&mu_);
  members_ = std::move(ids);
}

bool PeerGroup::IsMember(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return members_.empty() ||
         std::find(members_.begin(), members_.end(), id) != members_.end();
}

absl::StatusOr<std::shared_ptr<PeerPlane>> PeerPlane::Create(
    PeerPlaneOptions options) {
  if (options.handshake_timeout_ms <= 0 || options.max_handshakes <= 0) {
    return absl::InvalidArgumentError(
        "peer plane: handshake timeout and cap must be > 0");
  }
  sockaddr_in unused;
  if (!ParseIpv4(options.listen_address, &unused)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer plane: '", options.listen_address, "' is not IPV4:PORT"));
  }
  signal(SIGPIPE, SIG_IGN);
  return std::shared_ptr<PeerPlane>(new PeerPlane(std::move(options)));
}

PeerPlane::PeerPlane(PeerPlaneOptions options)
    : options_(std::move(options)), log_window_(absl::Now()) {}

PeerPlane::~PeerPlane() { Stop(); }

absl::Status PeerPlane::Listen() {
  absl::MutexLock lock(&mu_);
  if (listen_fd_ >= 0) return absl::OkStatus();
  if (stopping_) return absl::UnavailableError("peer plane: stopped");
  sockaddr_in address;
  (void)ParseIpv4(options_.listen_address, &address);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int on = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, kListenBacklog) != 0) {
    const std::string error = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for peers on ", options_.listen_address, ": ", error));
  }
  socklen_t len = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  port_ = ntohs(address.sin_port);
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event event {};
  event.events = EPOLLIN;
  event.data.fd = fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
  event.data.fd = wake_fd_;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd_, &event);
  listen_fd_ = fd;
  listener_ = std::thread([this, epoll_fd] {
    NameThisThread("dedup-peer-lsn");
    ListenLoop(epoll_fd);
  });
  return absl::OkStatus();
}

void PeerPlane::RegisterGroup(uint32_t group_id,
                              std::shared_ptr<PeerGroup> group,
                              PeerDeliver deliver) {
  absl::MutexLock lock(&mu_);
  groups_[group_id] = Registered{std::move(group), std::move(deliver)};
}

void PeerPlane::UnregisterGroup(uint32_t group_id) {
  absl::MutexLock lock(&mu_);
  groups_.erase(group_id);
}

void PeerPlane::Stop() {
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<RelayPump*> pumps;  // destroyed with the plane
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (wake_fd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
    // Blocked reads and writes of relays and dials fail at once.
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
    for (auto& [key, pump] : pumps_) pumps.push_back(pump.get());
  }
  if (listener_.joinable()) listener_.join();
  for (auto& worker : workers) worker->thread.join();
  // Not under mu_: a pump's last connections end through CloseTracked.
  for (RelayPump* pump : pumps) pump->Stop();
  absl::MutexLock lock(&mu_);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

bool PeerPlane::Spawn(absl::AnyInvocable<void()> fn) {
  std::vector<std::unique_ptr<Worker>> finished;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    auto done = std::partition(
        workers_.begin(), workers_.end(),
        [](const std::unique_ptr<Worker>& w) { return !w->done.load(); });
    std::move(done, workers_.end(), std::back_inserter(finished));
    workers_.erase(done, workers_.end());
    auto worker = std::make_unique<Worker>();
    Worker* raw = worker.get();
    raw->thread = std::thread([fn = std::move(fn), raw]() mutable {
      fn();
      raw->done.store(true);
    });
    workers_.push_back(std::move(worker));
  }
  for (auto& worker : finished) worker->thread.join();
  return true;
}

bool PeerPlane::Track(int fd) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  fds_.insert(fd);
  return true;
}

void PeerPlane::CloseTracked(int fd) {
  absl::MutexLock lock(&mu_);
  fds_.erase(fd);
  close(fd);
}

void PeerPlane::LogRefusal(absl::string_view remote, absl::string_view why) {
  absl::MutexLock lock(&log_mu_);
  const absl::Time now = absl::Now();
  if (now - log_window_ >= kLogWindow) {
    log_window_ = now;
    logged_in_window_ = 0;
  }
  if (logged_in_window_ >= kLogLinesPerWindow) {
    ++suppressed_;
    return;
  }
  ++logged_in_window_;
  std::string more;
  if (suppressed_ > 0) {
    more = absl::StrCat(" (and ", suppressed_, " more refusals not logged)");
    suppressed_ = 0;
  }
  LogWarning("peer connection from ", remote, " refused: ", why, more);
}

bool PeerPlane::Pump(RelayPump::Direction direction, const std::string& key,
                     PumpedConnection& connection) {
  RelayPump* pump = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    std::unique_ptr<RelayPump>& slot = pumps_[key];
    if (slot == nullptr) {
      slot = std::make_unique<RelayPump>(
          direction,
          [this](PumpedConnection& c, std::optional<FrameReject> reject) {
            RelayEnded(c, reject);
          });
    }
    pump = slot.get();
  }
  // Pumps live until Stop ends them (after stopping_): Add fails then.
  return pump->Add(connection);
}

void PeerPlane::RelayEnded(PumpedConnection& connection,
                           std::optional<FrameReject> reject) {
  if (reject.has_value()) {
    metrics_.Count(*reject);
    LogRefusal(connection.remote, absl::StrCat("Raft message rejected (",
                                               FrameRejectName(*reject), ")"));
  }
  metrics_.connections.fetch_sub(1);
  const int fd = connection.link->fd();
  connection.link.reset();
  CloseTracked(connection.pair_fd);
  CloseTracked(fd);
}

void PeerPlane::Connect(Dial dial, std::function<void(int fd)> done) {
  auto run = [this, dial = std::move(dial), done] { DialAndRelay(dial, done); };
  if (!Spawn(std::move(run))) done(-1);
}

std::unique_ptr<PeerLink> PeerPlane::DialHandshake(const Dial& dial, int fd) {
  sockaddr_in to;
  if (!ParseIpv4(dial.peer_address, &to) ||
      !ConnectWithin(fd, to, options_.handshake_timeout_ms)) {
    return nullptr;
  }
  SetIoTimeout(fd, options_.handshake_timeout_ms);
  SSL* ssl = nullptr;
  if (options_.tls != nullptr) {
    ssl = SSL_new(options_.tls->client());
    if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1) {
      LogDebug("peer ", dial.peer_address, ": TLS: ", TlsErrorText());
      SSL_free(ssl);
      return nullptr;
    }
  }
  auto link = std::make_unique<PeerLink>(fd, ssl);
  PeerHello hello;
  hello.group_id = dial.group_id;
  hello.node_id = dial.self_id;
  hello.address = dial.self_address;
  hello.token = options_.token;
  const std::string bytes = EncodePeerHello(hello);
  char status = -1;
  if (!link->WriteAll(bytes.data(), bytes.size()) ||
      link->Read(&status, 1) != 1) {
    return nullptr;
  }
  if (status != static_cast<char>(PeerHelloStatus::kOk)) {
    LogRefusal(dial.peer_address,
               absl::StrCat(
                   "it refused this node's hello: ",
                   PeerHelloStatusName(static_cast<PeerHelloStatus>(status))));
    return nullptr;
  }
  SetIoTimeout(fd, 0);
  SetPeerSocketOptions(fd);
  return link;
}

void PeerPlane::DialAndRelay(const Dial& dial,
                             const std::function<void(int)>& done) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || !Track(fd)) {
    if (fd >= 0) close(fd);
    done(-1);
    return;
  }
  std::unique_ptr<PeerLink> link = DialHandshake(dial, fd);
  int pair[2];
  if (link == nullptr ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    link.reset();
    CloseTracked(fd);
    done(-1);
    return;
  }
  if (!Track(pair[0])) {
    close(pair[0]);
    close(pair[1]);
    link.reset();
    CloseTracked(fd);
    done(-1);
    return;
  }
  // Counted before libraft sees it; the relay uncounts it when it ends.
  metrics_.connections.fetch_add(1);
  done(pair[1]);
  PumpedConnection connection;
  connection.link = std::move(link);
  connection.pair_fd = pair[0];
  connection.remote = dial.peer_address;
  if (!Pump(RelayPump::Direction::kOutbound,
            absl::StrCat("out/", dial.peer_address), connection)) {
    RelayEnded(connection, std::nullopt);
  }
}

}  // namespace dedup
