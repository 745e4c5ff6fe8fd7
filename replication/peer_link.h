// One node-to-node network connection, TLS or plaintext, and the TLS
// contexts its ends are made from (OpenSSL).
//
// Peers authenticate each other both ways (mTLS): the server asks for and
// verifies the client's certificate against the peer CA, the client
// verifies the server's against the same CA. Peers are dialled by IPv4
// literal, so names are not checked: the CA is the trust boundary.
#ifndef DEDUP_REPLICATION_PEER_LINK_H_
#define DEDUP_REPLICATION_PEER_LINK_H_

#include <openssl/ssl.h>
#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dedup {

struct PeerTlsFiles {
  std::string cert_file;  // PEM chain this node presents (both roles)
  std::string key_file;
  std::string ca_file;  // PEM CA verifying the other nodes
};

// Immutable after FromFiles; thread-safe (SSL_CTX is, once configured).
class PeerTls {
 public:
  // TLS 1.2 or later, no session tickets. INVALID_ARGUMENT naming the file.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<PeerTls>> FromFiles(
      const PeerTlsFiles& files);
  ~PeerTls();
  SSL_CTX* server() const { return server_; }
  SSL_CTX* client() const { return client_; }

 private:
  PeerTls() = default;
  SSL_CTX* server_ = nullptr;
  SSL_CTX* client_ = nullptr;
};

// A connected socket plus, with TLS, its session. Does not own the fd (the
// plane tracks and closes fds so that a stop can shut them down); owns the
// SSL. One reader and one writer thread at most, never both on one SSL
// (each direction of the plane uses one thread).
class PeerLink {
 public:
  PeerLink(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  int fd() const { return fd_; }
  SSL* ssl() const { return ssl_; }
  // Blocking: > 0 bytes read, 0 at the peer's end of stream, < 0 on error.
  [[nodiscard]] ssize_t Read(char* buf, size_t size);
  // Blocking: false when the connection failed.
  [[nodiscard]] bool WriteAll(const char* data, size_t size);

 private:
  const int fd_;
  SSL* const ssl_;
};

// Socket settings (best effort: a refusal leaves a slower, not a wrong,
// connection).
void SetBlocking(int fd, bool blocking);
// Send and receive timeouts of blocking calls; 0 clears them.
void SetIoTimeout(int fd, int timeout_ms);
// TCP_NODELAY (libraft's small messages must not wait for delayed ACKs),
// keepalive and TCP_USER_TIMEOUT so that a silently dead peer is noticed.
void SetPeerSocketOptions(int fd);

// The last OpenSSL error of this thread as text (and clears the queue).
std::string TlsErrorText();

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_LINK_H_
