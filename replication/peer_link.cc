#include "replication/peer_link.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

// Keepalive probes start after this idle time; an established peer that
// vanished without a FIN is dropped after roughly 2x this.
constexpr int kKeepaliveIdleS = 5;
constexpr int kKeepaliveIntervalS = 2;
constexpr int kKeepaliveProbes = 3;
// Unacknowledged data older than this fails the connection.
constexpr unsigned kUserTimeoutMs = 15000;

absl::Status Configure(SSL_CTX* ctx, const PeerTlsFiles& files) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer certificate ", files.cert_file, ": ", TlsErrorText()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer key ", files.key_file, ": ", TlsErrorText()));
  }
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer CA ", files.ca_file, ": ", TlsErrorText()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TlsErrorText() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown TLS error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::StatusOr<std::shared_ptr<PeerTls>> PeerTls::FromFiles(
    const PeerTlsFiles& files) {
  std::shared_ptr<PeerTls> tls(new PeerTls);
  tls->server_ = SSL_CTX_new(TLS_server_method());
  tls->client_ = SSL_CTX_new(TLS_client_method());
  if (tls->server_ == nullptr || tls->client_ == nullptr) {
    return absl::InternalError(absl::StrCat("SSL_CTX_new: ", TlsErrorText()));
  }
  for (SSL_CTX* ctx : {tls->server_, tls->client_}) {
    if (absl::Status s = Configure(ctx, files); !s.ok()) return s;
  }
  SSL_CTX_set_num_tickets(tls->server_, 0);
  SSL_CTX_set_verify(
      tls->server_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify(tls->client_, SSL_VERIFY_PEER, nullptr);
  return tls;
}

PeerTls::~PeerTls() {
  SSL_CTX_free(server_);
  SSL_CTX_free(client_);
}

PeerLink::~PeerLink() { SSL_free(ssl_); }

ssize_t PeerLink::Read(char* buf, size_t size) {
  if (ssl_ == nullptr) {
    while (true) {
      const ssize_t n = read(fd_, buf, size);
      if (n >= 0 || errno != EINTR) return n;
    }
  }
  size_t got = 0;
  if (SSL_read_ex(ssl_, buf, size, &got) == 1) {
    return static_cast<ssize_t>(got);
  }
  const int error = SSL_get_error(ssl_, 0);
  ERR_clear_error();
  return error == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

bool PeerLink::WriteAll(const char* data, size_t size) {
  while (size > 0) {
    size_t wrote = 0;
    if (ssl_ != nullptr) {
      if (SSL_write_ex(ssl_, data, size, &wrote) != 1) {
        ERR_clear_error();
        return false;
      }
    } else {
      const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      wrote = static_cast<size_t>(n);
    }
    data += wrote;
    size -= wrote;
  }
  return true;
}

void SetBlocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return;
  (void)fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

void SetIoTimeout(int fd, int timeout_ms) {
  struct timeval tv {};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void SetPeerSocketOptions(int fd) {
  const int on = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepaliveIdleS,
                   sizeof(kKeepaliveIdleS));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalS,
                   sizeof(kKeepaliveIntervalS));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes,
                   sizeof(kKeepaliveProbes));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUserTimeoutMs,
                   sizeof(kUserTimeoutMs));
}

}  // namespace dedup
