// The plane's listener thread: non-blocking accepts, TLS handshakes and
// hellos of every inbound connection on one epoll, each under a deadline,
// so that silent, slow or half-open strangers cost a slot for a bounded
// time and never a thread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "replication/peer_plane.h"

namespace dedup {

struct PeerPlane::Handshake {
  int fd = -1;
  SSL* ssl = nullptr;
  bool tls_done = false;
  bool want_write = false;
  absl::Time deadline;
  std::string received;
  std::string remote;
};

namespace {

constexpr int kMaxEvents = 64;
// Deadlines are checked at least this often.
constexpr int kTickMs = 50;

std::string RemoteOf(const sockaddr_in& from) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &from.sin_addr, text, sizeof(text));
  return absl::StrCat(text, ":", ntohs(from.sin_port));
}

void Watch(int epoll_fd, int fd, bool want_write, int op) {
  struct epoll_event event {};
  event.events = EPOLLIN | EPOLLRDHUP;
  if (want_write) event.events |= EPOLLOUT;
  event.data.fd = fd;
  epoll_ctl(epoll_fd, op, fd, &event);
}

}  // namespace

void PeerPlane::ListenLoop(int epoll_fd) {
  absl::flat_hash_map<int, Handshake> pending;
  int wake_fd;
  int listen_fd;
  {
    absl::MutexLock lock(&mu_);
    wake_fd = wake_fd_;
    listen_fd = listen_fd_;
  }
  struct epoll_event events[kMaxEvents];
  bool stop = false;
  while (!stop) {
    const int n = epoll_wait(epoll_fd, events, kMaxEvents, kTickMs);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd) {
        stop = true;
      } else if (fd == listen_fd) {
        AcceptAll(epoll_fd, pending);
      } else if (auto it = pending.find(fd); it != pending.end()) {
        bool finished = false;
        Advance(epoll_fd, it->second, finished);
        if (finished) pending.erase(it);
      }
    }
    const absl::Time now = absl::Now();
    for (auto it = pending.begin(); it != pending.end();) {
      if (now < it->second.deadline) {
        ++it;
        continue;
      }
      Refuse(it->second, HandshakeResult::kTimeout, PeerHelloStatus::kBusy,
             "handshake not finished within --peer_handshake_timeout_ms");
      pending.erase(it++);
    }
  }
  for (auto& [fd, h] : pending) {
    SSL_free(h.ssl);
    close(fd);
  }
  close(epoll_fd);
}

void PeerPlane::AcceptAll(int epoll_fd,
                          absl::flat_hash_map<int, Handshake>& pending) {
  while (true) {
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    int listen_fd;
    {
      absl::MutexLock lock(&mu_);
      listen_fd = listen_fd_;
    }
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // The connection stays queued and the socket readable: without a
        // pause this thread would spin until a descriptor is free.
        LogRefusal("(not accepted)", "out of file descriptors");
        std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
      }
      return;  // EAGAIN: the next event tries again
    }
    const std::string remote = RemoteOf(from);
    if (pending.size() >= static_cast<size_t>(options_.max_handshakes)) {
      metrics_.Count(HandshakeResult::kBusy);
      LogRefusal(remote, "too many connections in handshake");
      // Plaintext peers can be told why; over TLS there is no channel yet.
      if (options_.tls == nullptr) {
        const char busy = static_cast<char>(PeerHelloStatus::kBusy);
        (void)send(fd, &busy, 1, MSG_NOSIGNAL);
      }
      close(fd);
      continue;
    }
    Handshake& h = pending[fd];
    h.fd = fd;
    h.remote = remote;
    h.deadline =
        absl::Now() + absl::Milliseconds(options_.handshake_timeout_ms);
    if (options_.tls != nullptr) {
      h.ssl = SSL_new(options_.tls->server());
      if (h.ssl != nullptr) SSL_set_fd(h.ssl, fd);
    }
    h.tls_done = options_.tls == nullptr;
    Watch(epoll_fd, fd, false, EPOLL_CTL_ADD);
    bool finished = false;
    Advance(epoll_fd, h, finished);
    if (finished) pending.erase(fd);
  }
}

void PeerPlane::Advance(int epoll_fd, Handshake& h, bool& finished) {
  if (!h.tls_done) {
    if (h.ssl == nullptr) {
      Refuse(h, HandshakeResult::kTlsFailed, PeerHelloStatus::kBusy,
             "SSL_new failed");
      finished = true;
      return;
    }
    const int rv = SSL_accept(h.ssl);
    if (rv != 1) {
      const int error = SSL_get_error(h.ssl, rv);
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        const bool want_write = error == SSL_ERROR_WANT_WRITE;
        if (want_write != h.want_write) {
          h.want_write = want_write;
          Watch(epoll_fd, h.fd, want_write, EPOLL_CTL_MOD);
        }
        return;
      }
      const std::string why = absl::StrCat("TLS handshake: ", TlsErrorText());
      Refuse(h, HandshakeResult::kTlsFailed, PeerHelloStatus::kBusy, why);
      finished = true;
      return;
    }
    h.tls_done = true;
    if (h.want_write) {
      h.want_write = false;
      Watch(epoll_fd, h.fd, false, EPOLL_CTL_MOD);
    }
  }
  ReadHello(epoll_fd, h, finished);
}

void PeerPlane::ReadHello(int epoll_fd, Handshake& h, bool& finished) {
  char buf[1024];
  while (true) {
    // One byte beyond the longest hello is enough to see trailing bytes.
    const size_t room =
        std::min(sizeof(buf), kMaxHelloBytes + 1 - h.received.size());
    ssize_t n;
    if (h.ssl != nullptr) {
      size_t got = 0;
      if (SSL_read_ex(h.ssl, buf, room, &got) == 1) {
        n = static_cast<ssize_t>(got);
      } else {
        const int error = SSL_get_error(h.ssl, 0);
        ERR_clear_error();
        if (error == SSL_ERROR_WANT_READ) break;
        n = error == SSL_ERROR_ZERO_RETURN ? 0 : -1;
      }
    } else {
      n = recv(h.fd, buf, room, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    }
    if (n <= 0) {
      Refuse(h, HandshakeResult::kBadHello, PeerHelloStatus::kMalformed,
             "connection closed before its hello ended");
      finished = true;
      return;
    }
    h.received.append(buf, static_cast<size_t>(n));
    if (h.received.size() > kMaxHelloBytes) break;
  }
  PeerHello hello;
  size_t consumed = 0;
  switch (ParsePeerHello(h.received, &hello, &consumed)) {
    case HelloParse::kIncomplete:
      return;
    case HelloParse::kBadMagic:
      Refuse(h, HandshakeResult::kBadHello, PeerHelloStatus::kBadMagic,
             "not a dedup peer hello (wrong magic or version)");
      finished = true;
      return;
    case HelloParse::kMalformed:
      Refuse(h, HandshakeResult::kBadHello, PeerHelloStatus::kMalformed,
             "malformed hello");
      finished = true;
      return;
    case HelloParse::kDone:
      break;
  }
  if (consumed != h.received.size()) {
    Refuse(h, HandshakeResult::kBadHello, PeerHelloStatus::kMalformed,
           "bytes after the hello before the answer");
    finished = true;
    return;
  }
  Decide(epoll_fd, h, hello, finished);
}

PeerHelloStatus PeerPlane::Authorize(const Handshake& h, const PeerHello& hello,
                                     std::string& why) {
  PeerCredentials credentials;
  credentials.group_id = hello.group_id;
  credentials.node_id = hello.node_id;
  credentials.raft_address = hello.address;
  credentials.token = hello.token;
  credentials.remote_address = h.remote;
  if (h.ssl != nullptr) {
    if (X509* cert = SSL_get_peer_certificate(h.ssl)) {
      credentials.certificate_verified =
          SSL_get_verify_result(h.ssl) == X509_V_OK;
      char subject[256] = {};
      X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
      credentials.certificate_subject = subject;
      X509_free(cert);
    }
  }
  if (options_.authenticator) {
    if (absl::Status s = options_.authenticator(credentials); !s.ok()) {
      why = absl::StrCat("node ", hello.node_id, ": ", s.message());
      return PeerHelloStatus::kUnauthorized;
    }
  }
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(hello.group_id);
  if (it == groups_.end()) {
    why = absl::StrCat("no Raft group ", hello.group_id, " on this node");
    return PeerHelloStatus::kUnknownGroup;
  }
  if (!it->second.group->IsMember(hello.node_id)) {
    why = absl::StrCat("node ", hello.node_id, " is not a member of group ",
                       hello.group_id);
    return PeerHelloStatus::kUnauthorized;
  }
  return PeerHelloStatus::kOk;
}

void PeerPlane::Decide(int epoll_fd, Handshake& h, const PeerHello& hello,
                       bool& finished) {
  finished = true;
  // The relay owns the connection from here (or it is closed): the
  // listener must not see its traffic.
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, h.fd, nullptr);
  std::string why;
  const PeerHelloStatus status = Authorize(h, hello, why);
  if (status != PeerHelloStatus::kOk) {
    Refuse(h, HandshakeResult::kUnauthorized, status, why);
    return;
  }
  // From here on the connection is blocking, as its relay will use it.
  SetBlocking(h.fd, true);
  SetIoTimeout(h.fd, options_.handshake_timeout_ms);
  auto link = std::make_unique<PeerLink>(h.fd, h.ssl);
  h.ssl = nullptr;
  const char ok = static_cast<char>(PeerHelloStatus::kOk);
  if (!link->WriteAll(&ok, 1)) {
    link.reset();
    close(h.fd);
    metrics_.Count(HandshakeResult::kTlsFailed);
    return;
  }
  SetIoTimeout(h.fd, 0);
  SetPeerSocketOptions(h.fd);
  metrics_.Count(HandshakeResult::kOk);
  Establish(std::move(link), hello, h.remote);
}

void PeerPlane::Refuse(Handshake& h, HandshakeResult result,
                       PeerHelloStatus status, absl::string_view why) {
  metrics_.Count(result);
  LogRefusal(h.remote, why);
  // The answer is best effort: the connection is non-blocking and closed
  // next. Before the TLS handshake ended there is no channel to answer on.
  if (h.tls_done && result != HandshakeResult::kTimeout) {
    const char byte = static_cast<char>(status);
    if (h.ssl != nullptr) {
      size_t wrote = 0;
      (void)SSL_write_ex(h.ssl, &byte, 1, &wrote);
      ERR_clear_error();
    } else {
      (void)send(h.fd, &byte, 1, MSG_NOSIGNAL);
    }
  }
  SSL_free(h.ssl);
  h.ssl = nullptr;
  close(h.fd);
}

void PeerPlane::Establish(std::unique_ptr<PeerLink> link,
                          const PeerHello& hello, const std::string& remote) {
  const int fd = link->fd();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    link.reset();
    close(fd);
    return;
  }
  std::shared_ptr<PeerGroup> group;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(hello.group_id);
    if (!stopping_ && it != groups_.end()) {
      group = it->second.group;
      fds_.insert(fd);
      fds_.insert(pair[0]);
      // Counted before libraft sees it; the relay uncounts it at its end.
      metrics_.connections.fetch_add(1);
      it->second.deliver(pair[1], hello.node_id, hello.address);
    }
  }
  if (group == nullptr) {
    link.reset();
    close(fd);
    close(pair[0]);
    close(pair[1]);
    return;
  }
  PumpedConnection connection;
  connection.link = std::move(link);
  connection.pair_fd = pair[0];
  connection.remote = remote;
  connection.validator = std::make_unique<FrameValidator>(
      options_.frame_limits, [group] { return group->term(); });
  // Stopping: the relay never runs, and Stop shut the fds down already.
  if (!Pump(RelayPump::Direction::kInbound, absl::StrCat("in/", hello.node_id),
            connection)) {
    RelayEnded(connection, std::nullopt);
  }
}

}  // namespace dedup
